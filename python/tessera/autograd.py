"""tessera.autograd: Functions with a forward and a backward written in Python (torch.autograd.Function),
and gradcheck, the library's finite-difference check.

    class Exp(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    y = Exp.apply(x)

forward runs without recording (as under no_grad); the result is one node on the tape whose backward
calls yours (with the GIL) and checks each gradient's shape against its input's. backward returns one
gradient per forward argument (None for non-tensors or inputs without one)."""
from ._tessera import Tensor, is_grad_enabled, set_grad_enabled
from ._tessera import autograd as _native


class FunctionCtx:
    def __init__(self):
        self.saved_tensors = ()
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


class Function:
    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError("a Function subclass must define backward(ctx, grad_output)")

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        previous = is_grad_enabled()
        set_grad_enabled(False)
        try:
            result = cls.forward(ctx, *args)
        finally:
            set_grad_enabled(previous)
        if not isinstance(result, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return one tessera.Tensor, got {type(result).__name__}")
        if not (previous and any(ctx.needs_input_grad)):
            return result
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        inputs = [args[i] for i in positions]

        def backward(grad):
            grads = cls.backward(ctx, grad)
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) == len(args):  # PyTorch's convention: one per forward argument
                grads = [grads[i] for i in positions]
            elif len(grads) != len(inputs):
                raise ValueError(f"[{cls.__name__}.backward] returned {len(grads)} gradient(s) for "
                                 f"{len(args)} argument(s) ({len(inputs)} tensor(s))")
            return list(grads)

        return _native._record_function(result.detach(), cls.__name__, inputs, backward)


def gradcheck(fn, inputs, eps=1e-2, atol=2e-3, rtol=2e-2):
    """Finite differences against backward for fn(*inputs) (float32 inputs). Returns True, or raises
    ValueError naming the first mismatching element."""
    ok, message, _ = _native.gradcheck(fn, list(inputs), eps, atol, rtol)
    if not ok:
        raise ValueError(f"gradcheck failed: {message}")
    return True


__all__ = ["Function", "FunctionCtx", "gradcheck"]
