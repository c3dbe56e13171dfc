"""tessera.Tensor from Python: values against NumPy, memory shared with NumPy, autograd, errors."""
import gc

import numpy as np
import pytest

import tessera


def test_factories_dtypes_and_shapes():
    t = tessera.zeros(2, 3)
    assert t.shape == (2, 3) and t.dtype == tessera.float32 and t.ndim == 2 and t.numel() == 6
    assert tessera.ones((4,)).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert tessera.arange(5).dtype == tessera.int64
    assert tessera.tensor([[1, 2], [3, 4]]).dtype == tessera.int64
    assert tessera.tensor([1.5, 2.0]).dtype == tessera.float32
    assert tessera.tensor([1, 2], dtype=tessera.float32).tolist() == [1.0, 2.0]
    assert tessera.full((2, 2), 7.0).sum().item() == 28.0
    assert len(tessera.zeros(5, 2)) == 5 and tessera.zeros(5, 2).size(1) == 2


def test_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tessera.from_numpy(a)
    a[1, 2] = 100.0
    assert t[1, 2].item() == 100.0  # the tensor sees NumPy's write
    t.fill_(3.0)
    assert a.sum() == 36.0  # NumPy sees the tensor's
    back = t.numpy()
    assert np.shares_memory(back, a)
    # A strided view of an array stays a view.
    col = tessera.from_numpy(a[:, 1])
    assert col.shape == (3,) and col.stride() == (4,)
    # The array outlives the tensor's owner, and the tensor the array's.
    view = tessera.from_numpy(np.ones(1000, dtype=np.float32))
    gc.collect()
    assert view.sum().item() == 1000.0
    arr = tessera.ones(3).numpy()
    gc.collect()
    assert arr.tolist() == [1.0, 1.0, 1.0]
    assert np.asarray(tessera.ones(2, 2)).shape == (2, 2)
    assert memoryview(tessera.ones(3)).format == "f"


def test_numpy_refusals_are_value_errors():
    with pytest.raises(ValueError, match="float64"):
        tessera.from_numpy(np.zeros(3))
    with pytest.raises(ValueError, match="requires grad"):
        tessera.ones(2, requires_grad=True).numpy()
    with pytest.raises(ValueError, match="bfloat16"):
        tessera.ones(2).to(tessera.bfloat16).numpy()
    with pytest.raises(ValueError, match="stride"):
        tessera.from_numpy(np.arange(4, dtype=np.float32)[::-1])


def test_ops_match_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5), dtype=np.float32), rng.standard_normal((5,), dtype=np.float32)
    ta, tb = tessera.tensor(a), tessera.tensor(b)
    np.testing.assert_allclose((ta + tb).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((ta * 2 - 1).numpy(), a * 2 - 1, rtol=1e-6)
    np.testing.assert_allclose((1 - ta).numpy(), 1 - a, rtol=1e-6)
    np.testing.assert_allclose((ta / (tb * tb + 1)).numpy(), a / (b * b + 1), rtol=1e-5)
    np.testing.assert_allclose((ta @ ta.T).numpy(), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.sum(dim=1).numpy(), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(ta.mean(dim=(0, 1)).item(), a.mean(), rtol=1e-5)
    np.testing.assert_allclose(ta.softmax(dim=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5)
    values, indices = ta.max(dim=1)
    np.testing.assert_array_equal(indices.numpy(), a.argmax(1))
    np.testing.assert_allclose(values.numpy(), a.max(1))
    assert ta.reshape(5, 4).shape == (5, 4) and ta.reshape((20,)).shape == (20,)
    np.testing.assert_allclose(tessera.cat([ta, ta], dim=0).numpy(), np.concatenate([a, a]))


def test_indexing_matches_numpy():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = tessera.from_numpy(a.copy())
    for index in [1, -1, (1, 2), (slice(None), 1), (slice(1, 3), slice(None), slice(0, 5, 2)), (Ellipsis, 1),
                  (None, 0), (0, Ellipsis, None)]:
        np.testing.assert_array_equal(t[index].numpy(), a[index], err_msg=str(index))
    np.testing.assert_array_equal(t[tessera.tensor([2, 0])].numpy(), a[[2, 0]])
    t[0, 1] = 0.0
    a[0, 1] = 0.0
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(IndexError):
        t[3]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]


def test_autograd_matches_the_analytic_gradient_and_finite_differences():
    x = tessera.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    w = tessera.tensor([[1.0, 2.0], [-0.5, 0.3]], requires_grad=True)
    loss = ((x @ w).tanh() ** 2).sum()
    loss.backward()
    xv, wv = x.detach().numpy(), w.detach().numpy()
    y = np.tanh(xv @ wv)
    gy = 2 * y * (1 - y * y)
    np.testing.assert_allclose(x.grad.numpy(), gy @ wv.T, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), xv.T @ gy, rtol=1e-5)

    def f(xv):
        return float((np.tanh(xv.astype(np.float64) @ wv) ** 2).sum())

    eps = 1e-3
    for i in range(2):
        for j in range(2):
            plus, minus = xv.copy(), xv.copy()
            plus[i, j] += eps
            minus[i, j] -= eps
            assert abs((f(plus) - f(minus)) / (2 * eps) - x.grad.numpy()[i, j]) < 2e-3
    assert x.is_leaf and not loss.is_leaf


def test_no_grad_and_detach():
    x = tessera.ones(3, requires_grad=True)
    with tessera.no_grad():
        y = x * 2
    assert not y.requires_grad
    assert tessera.is_grad_enabled()
    z = (x * 2).detach()
    assert not z.requires_grad

    @tessera.no_grad()
    def doubled(t):
        return t * 2

    assert not doubled(x).requires_grad


def test_caller_mistakes_are_value_errors_naming_the_op():
    with pytest.raises(ValueError, match=r"\[matmul\]"):
        tessera.ones(2, 3) @ tessera.ones(2, 3)
    with pytest.raises(ValueError):
        tessera.ones(2, 3) + tessera.ones(4)
    with pytest.raises(TypeError):
        tessera.ones(2) + "a"
    with pytest.raises(ValueError):
        tessera.ones(2, 3).item()


def test_autocast_multiplies_in_bf16():
    a = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)
    ta = tessera.from_numpy(a)
    with tessera.autocast(tessera.bfloat16):
        mixed = (ta @ ta.T).numpy()
    exact = (ta @ ta.T).numpy()
    rounded = tessera.from_numpy(a).to(tessera.bfloat16).to(tessera.float32).numpy().astype(np.float64)
    np.testing.assert_allclose(mixed, rounded @ rounded.T, rtol=1e-4, atol=1e-3)
    assert np.abs(mixed - exact).max() > 1e-4
