"""Functions written in Python on the C++ tape, checked by finite differences (tessera.autograd.gradcheck)."""
import numpy as np
import pytest

import tessera
from tessera.autograd import Function, gradcheck


class ScaledExp(Function):
    """y = exp(x) * s for a tensor x and a number s."""

    @staticmethod
    def forward(ctx, x, s):
        y = x.exp() * s
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y, None


class Bilinear(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.T, a.T @ grad


def test_a_python_function_matches_the_builtin_ops_gradient():
    x = tessera.tensor([[0.1, -0.5], [1.0, 0.3]], requires_grad=True)
    (ScaledExp.apply(x, 2.0).tanh()).sum().backward()
    custom = x.grad.numpy().copy()
    x.grad = None
    ((x.exp() * 2.0).tanh()).sum().backward()
    np.testing.assert_allclose(custom, x.grad.numpy(), rtol=1e-6)


def test_finite_differences_agree_with_python_backwards():
    tessera.manual_seed(0)
    assert gradcheck(lambda a, b: Bilinear.apply(a, b).tanh(), [tessera.randn(3, 4), tessera.randn(4, 2)])
    assert gradcheck(lambda x: ScaledExp.apply(x, 0.5), [tessera.randn(5)])


def test_a_wrong_backward_is_refused_naming_the_function():
    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return tessera.ones(7)

    x = tessera.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"\[WrongShape.backward\].*shape"):
        WrongShape.apply(x).sum().backward()

    class Raises(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raise KeyError("from backward")

    with pytest.raises(KeyError, match="from backward"):
        Raises.apply(tessera.ones(2, requires_grad=True)).sum().backward()
    with pytest.raises(ValueError, match="gradcheck failed"):
        gradcheck(lambda x: WrongGrad.apply(x), [tessera.randn(3)])


class WrongGrad(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 2  # should be 3


def test_no_record_without_grad():
    x = tessera.ones(2)
    assert not ScaledExp.apply(x, 1.0).requires_grad
    with tessera.no_grad():
        assert not ScaledExp.apply(tessera.ones(2, requires_grad=True), 1.0).requires_grad
