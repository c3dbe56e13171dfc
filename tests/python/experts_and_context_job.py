"""Run by test_distributed.py under `tessera run` with 2 ranks, from Python:
- nn.MixtureOfExperts with its 4 experts spread over both ranks (2 each), each rank its own tokens, against
  the whole mixture on both ranks' tokens: the same outputs, and each rank's expert gradients the whole's;
- nn.CausalSelfAttention with each sequence cut over both ranks (ring and Ulysses), against the whole
  sequence: each rank's tokens get the whole's outputs, and the ranks' gradients add up to the whole's."""
import numpy as np

import tessera
import tessera.distributed as dist
from tessera import nn

group = dist.init_process_group()
rank = dist.get_rank()

tessera.manual_seed(5)  # every rank builds the same whole layers and draws the same inputs
whole = nn.MixtureOfExperts(6, 8, experts=4, top_k=2, capacity_factor=4.0, aux_loss_weight=0.0)
spread = nn.MixtureOfExperts(6, 8, experts=4, top_k=2, capacity_factor=4.0, aux_loss_weight=0.0)
spread.load_state_dict(whole.state_dict())
xs = [tessera.randn(5, 6) for _ in range(2)]
ws = [tessera.randn(5, 6) for _ in range(2)]
for x, w in zip(xs, ws):
    (whole(x) * w).sum().backward()
spread.place_experts(group)
assert spread.local_experts == 2 and spread.first_expert == 2 * rank
y = spread(xs[rank])
with tessera.no_grad():
    np.testing.assert_allclose(y.detach().numpy(), whole(xs[rank]).numpy(), rtol=1e-5, atol=1e-6)
(y * ws[rank]).sum().backward()
np.testing.assert_allclose(spread.fc_weight.grad.numpy(), whole.fc_weight.grad.numpy()[2 * rank:2 * rank + 2],
                           rtol=1e-4, atol=1e-6)
assert sum(spread.last_routing["chosen"]) == 10, spread.last_routing
print(f"rank {rank} experts ok", flush=True)

for attention, positions in (("ring", [[0, 1, 6, 7], [2, 3, 4, 5]]), ("ulysses", [[0, 1, 2, 3], [4, 5, 6, 7]])):
    tessera.manual_seed(9)
    full = nn.CausalSelfAttention(8, 2)
    part = nn.CausalSelfAttention(8, 2)
    part.load_state_dict(full.state_dict())
    x = tessera.randn(2, 8, 8)
    w = tessera.randn(2, 8, 8)
    out = full(x)
    (out * w).sum().backward()
    part.spread_sequence(group, attention=attention)
    mine = positions[rank]
    y = part(tessera.tensor(x.numpy()[:, mine, :]))
    np.testing.assert_allclose(y.detach().numpy(), out.detach().numpy()[:, mine, :], rtol=1e-5, atol=1e-6)
    (y * tessera.tensor(w.numpy()[:, mine, :])).sum().backward()
    grads = [p.grad for p in part.parameters()]
    summed = [tessera.zeros(*g.shape) for g in grads]
    for g, s in zip(grads, summed):
        s.copy_(g)
        dist.all_reduce(s)
    for s, p in zip(summed, full.parameters()):
        np.testing.assert_allclose(s.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-5)
    print(f"rank {rank} context {attention} ok", flush=True)
