"""Run by test_distributed.py under `tessera run` with 2 ranks: a device mesh with tp = 2, and a
column-parallel then row-parallel MLP (Megatron's split) equal to the whole MLP, forward and backward."""
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
