"""tessera.distributed: torch.distributed's names over tessera's process groups.

    import tessera.distributed as dist
    dist.init_process_group()          # as `tessera run`, mpirun or srun started this process
    ddp = dist.DistributedDataParallel(model)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)

Every collective waits at most the group's timeout and then raises TimeoutError naming the
operation and the ranks that did not arrive; a lost peer raises tessera.PeerFailureError."""
import atexit as _atexit

from .._tessera import distributed as _native

ReduceOp = _native.ReduceOp
ProcessGroup = _native.ProcessGroup
Work = _native.Work
init_process_group = _native.init_process_group
destroy_process_group = _native.destroy_process_group
is_initialized = _native.is_initialized
launched_as_job = _native.launched_as_job
get_rank = _native.get_rank
get_world_size = _native.get_world_size
new_group = _native.new_group
all_reduce = _native.all_reduce
broadcast = _native.broadcast
reduce = _native.reduce
all_gather = _native.all_gather
all_gather_into_tensor = _native.all_gather_into_tensor
reduce_scatter_tensor = _native.reduce_scatter_tensor
barrier = _native.barrier
symmetric_zeros = _native.symmetric_zeros
send = _native.send
recv = _native.recv
all_gather_with_grad = _native.all_gather_with_grad
all_to_all_with_grad = _native.all_to_all_with_grad
DistributedDataParallel = _native.DistributedDataParallel
ZeroDataParallel = _native.ZeroDataParallel
kmeans = _native.kmeans
DeviceMesh = _native.DeviceMesh
ColumnParallelLinear = _native.ColumnParallelLinear
RowParallelLinear = _native.RowParallelLinear
ParallelTransformerBlock = _native.ParallelTransformerBlock
scatter_to_sequence_parallel_region = _native.scatter_to_sequence_parallel_region
sum_partial_gradients = _native.sum_partial_gradients


def FullyShardedDataParallel(module, **options):
    """FSDP's full sharding is ZeRO stage 3: ZeroDataParallel(module, stage=3, ...)."""
    options.setdefault("stage", 3)
    return ZeroDataParallel(module, **options)


from . import ps  # noqa: E402,F401

# The default group's threads end before the interpreter does, not in a static destructor after it.
_atexit.register(destroy_process_group)

__all__ = [name for name in dir() if not name.startswith("_")]
