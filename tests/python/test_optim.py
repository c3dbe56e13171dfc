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


def test_grad_scaler_skips_an_overflowing_step_then_trains():
    # fp16 products: a scale of 2^30 pushes the backward's gradients past 65504 (inf), so the first
    # step is skipped and the scale halves; once it fits, steps are taken with unscaled gradients.
    rng = np.random.default_rng(0)
    x = tessera.from_numpy(rng.standard_normal((32, 8)).astype(np.float32))
    y = tessera.from_numpy(rng.integers(0, 3, 32).astype(np.int64))
    tessera.manual_seed(0)
    model = nn.Linear(8, 3)
    opt = optim.SGD(model.parameters(), lr=0.1)
    scaler = optim.GradScaler(init_scale=2.0 ** 30, growth_interval=1000)
    stepped, losses = [], []
    for _ in range(40):
        opt.zero_grad()
        with tessera.autocast(tessera.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        before = model.weight.detach().numpy().copy()
        stepped.append(scaler.step(opt))
        if not stepped[-1]:
            np.testing.assert_array_equal(model.weight.detach().numpy(), before)  # a skipped step changes nothing
        scaler.update()
        losses.append(loss.item())
    assert not stepped[0] and stepped[-1]
    assert scaler.skipped_steps == stepped.count(False) >= 1
    assert scaler.get_scale() < 2.0 ** 30
    assert losses[-1] < losses[0]
    state = scaler.state_dict()
    again = optim.GradScaler()
    again.load_state_dict(state)
    assert again.get_scale() == scaler.get_scale() and again.skipped_steps == scaler.skipped_steps
