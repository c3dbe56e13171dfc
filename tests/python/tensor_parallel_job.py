"""Run by test_distributed.py under `tessera run` with 2 ranks: a device mesh with tp = 2, and a
column-parallel then row-parallel MLP (Megatron's split) equal to the whole MLP, forward and backward,
and a sequence-parallel GPT block equal to the whole block."""
import numpy as np

import tessera
import tessera.distributed as dist
from tessera import nn

dist.init_process_group()
mesh = dist.DeviceMesh(dp=1, pp=1, tp=2)
assert mesh.shape == {"dp": 1, "pp": 1, "tp": 2}, mesh.shape
assert mesh.coordinates["tp"] == dist.get_rank(), mesh.coordinates

tessera.manual_seed(7)  # every rank builds the same whole layers
fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
x = tessera.randn(4, 6)
whole = fc2(nn.functional.relu(fc1(x)))
whole.sum().backward()

col = dist.ColumnParallelLinear(fc1, mesh.tp_group, gather_output=False)
row = dist.RowParallelLinear(fc2, mesh.tp_group, input_is_parallel=True)
split = row(nn.functional.relu(col(x)))
np.testing.assert_allclose(split.detach().numpy(), whole.detach().numpy(), rtol=1e-5, atol=1e-6)
split.sum().backward()
rank = dist.get_rank()
# This rank's rows of fc1's weight gradient are its block of the whole one.
np.testing.assert_allclose(col.parameters()[0].grad.numpy(), fc1.weight.grad.numpy()[rank * 4:(rank + 1) * 4],
                           rtol=1e-5, atol=1e-6)
print(f"rank {rank} tensor-parallel ok", flush=True)

# Sequence parallelism: a GPT block cut over the heads, each rank holding its tokens of every
# sequence, equal to the whole block; the LayerNorms' gradients add up over the group.
tessera.manual_seed(8)
block = nn.TransformerBlock(8, 2)
xs = tessera.randn(2, 4, 8)
whole = block(xs)
whole.sum().backward()
sp = dist.ParallelTransformerBlock(block, mesh.tp_group, sequence_parallel=True, overlap_chunks=2)
mine = dist.scatter_to_sequence_parallel_region(xs, mesh.tp_group)
out = sp(mine)
np.testing.assert_allclose(out.detach().numpy(), whole.detach().numpy()[:, rank * 2:(rank + 1) * 2],
                           rtol=1e-5, atol=1e-5)
out.sum().backward()
dist.sum_partial_gradients(sp.token_parameters(), mesh.tp_group)
ln_1_weight = dict(sp.named_parameters())["ln_1.weight"]
np.testing.assert_allclose(ln_1_weight.grad.numpy(), dict(block.named_parameters())["ln_1.weight"].grad.numpy(),
                           rtol=1e-4, atol=1e-5)
print(f"rank {rank} sequence-parallel ok", flush=True)
