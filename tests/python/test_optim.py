"""tessera.optim from Python: updates equal the formulas, schedules set the lr, state round-trips."""
import numpy as np

import tessera
from tessera import nn, optim


def quadratic_grad(p):
    loss = (p * p).sum()
    loss.backward()


def test_sgd_step_is_p_minus_lr_grad():
    p = tessera.tensor([1.0, -2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    quadratic_grad(p)
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [1.0 - 0.1 * 2.0, -2.0 + 0.1 * 4.0], rtol=1e-6)
    opt.zero_grad()
    assert p.grad is None


def test_adam_first_step_moves_each_parameter_by_lr():
    p = tessera.tensor([3.0, -1.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.01)
    quadratic_grad(p)
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [2.99, -0.99], rtol=1e-5)
    state = opt.state_dict()
    assert len(state) > 0
    other = optim.Adam([tessera.tensor([3.0, -1.0], requires_grad=True)], lr=0.01)
    other.load_state_dict(dict(state))


def test_schedules_set_the_lr():
    model = nn.Linear(2, 2)
    opt = optim.SGD(model.parameters(), lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(4):
        lrs.append(opt.lr)
        sched.step()
    assert lrs == [1.0, 1.0, 0.5, 0.5]
    cos = optim.lr_scheduler.CosineAnnealingLR(optim.SGD(model.parameters(), lr=1.0), T_max=10)
    cos.step()
    assert 0.9 < cos.get_last_lr()[0] < 1.0


def test_training_a_linear_model_converges():
    tessera.manual_seed(0)
    x = tessera.randn(64, 3)
    w_true = tessera.tensor([[1.0], [-2.0], [0.5]])
    y = x @ w_true
    model = nn.Linear(3, 1)
    opt = optim.SGD(model.parameters(), lr=0.1)
    for _ in range(200):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-4
    np.testing.assert_allclose(model.weight.detach().numpy().ravel(), [1.0, -2.0, 0.5], atol=1e-2)
