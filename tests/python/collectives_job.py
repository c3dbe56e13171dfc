"""Run by test_distributed.py under `tessera run` (and mpirun): each collective from Python, checked
on every rank. Prints "rank R ok" at the end."""
import os
import sys

import numpy as np

import tessera
import tessera.distributed as dist


def main():
    dist.init_process_group(timeout=float(os.environ.get("JOB_TIMEOUT_S", "60")))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and world >= 2

    t = tessera.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [world * (world + 1) / 2] * 4, t.tolist()
    m = tessera.full((2,), float(rank))
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    assert m.tolist() == [world - 1.0] * 2

    b = tessera.full((3,), 42.0) if rank == 0 else tessera.zeros(3)
    dist.broadcast(b, src=0)
    assert b.tolist() == [42.0] * 3

    outputs = [tessera.zeros(2) for _ in range(world)]
    dist.all_gather(outputs, tessera.full((2,), float(rank)))
    assert [o.tolist() for o in outputs] == [[float(r)] * 2 for r in range(world)]

    gathered = tessera.zeros(world * 2)
    work = dist.all_gather_into_tensor(gathered, tessera.full((2,), float(rank)), async_op=True)
    work.wait()
    assert gathered.tolist() == [float(r) for r in range(world) for _ in range(2)]

    out = tessera.zeros(2)
    dist.reduce_scatter_tensor(out, tessera.ones(world * 2))
    assert out.tolist() == [float(world)] * 2

    if rank == 0:
        dist.send(tessera.tensor([7.0, 8.0]), dst=1)
    elif rank == 1:
        r = tessera.zeros(2)
        dist.recv(r, src=0)
        assert r.tolist() == [7.0, 8.0]

    # all_gather_with_grad: the gradient of every rank's rows comes back to their owner.
    x = tessera.full((1, 3), float(rank + 1), requires_grad=True)
    everyone = dist.all_gather_with_grad(x)
    assert everyone.shape == (world, 3)
    (everyone * everyone).sum().backward()
    # Each rank's loss uses every row; the sum over ranks of d/dx_r is world * 2 x_r.
    np.testing.assert_allclose(x.grad.numpy(), np.full((1, 3), world * 2.0 * (rank + 1)))

    # Symmetric memory (DDP's buckets): over shm the all-reduce reads and writes the peers' buffers.
    sym = dist.symmetric_zeros((3, 20000))
    assert sym.shape == (3, 20000) and sym.sum().item() == 0.0
    sym.fill_(float(rank + 1))
    dist.all_reduce(sym)
    assert sym.numpy().min() == sym.numpy().max() == world * (world + 1) / 2

    sub = dist.new_group([0, 1])
    s = tessera.ones(1)
    dist.all_reduce(s, group=sub)
    assert s.item() == 2.0
    dist.barrier()
    print(f"rank {rank} ok", flush=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"rank {os.environ.get('RANK', '?')} FAILED: {e}", flush=True)
        sys.exit(1)
