"""tessera: distributed deep-learning training, a C++ engine with PyTorch's habits.

    import tessera
    from tessera import nn, optim

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

Tensors share memory with NumPy both ways (Tensor.numpy(), tessera.from_numpy). Ops, backward and
collectives run in C++ with the GIL released. See docs/python.md.
"""

import numpy as _np

from ._tessera import (  # noqa: F401
    PeerFailureError,
    Tensor,
    TesseraError,
    arange,
    autocast,
    bfloat16,
    cat,
    device,
    dtype,
    empty,
    float16,
    float32,
    from_numpy,
    full,
    get_num_threads,
    index_select,
    int64,
    is_grad_enabled,
    manual_seed,
    matmul,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    set_grad_enabled,
    set_num_threads,
    split,
    stack,
    where,
    zeros,
    zeros_like,
)
from ._tessera import float as float  # noqa: F401,E402  (tessera.float, as torch.float)
from ._tessera import long as long  # noqa: F401,E402
from ._tessera import train as _train_native  # noqa: E402
from ._tensor_index import install as _install_indexing  # noqa: E402

_install_indexing(Tensor)


def tensor(data, dtype=None, requires_grad=False):
    """A new tensor holding a copy of `data` (nested lists, numbers, a NumPy array or a Tensor).

    Integers (and booleans) become int64, anything else float32, unless `dtype` says otherwise."""
    if isinstance(data, Tensor):
        result = data.detach().clone()
    else:
        array = _np.asarray(data)
        if dtype is None:
            dtype = int64 if array.dtype.kind in "iub" else float32
        numpy_type = _np.int64 if dtype == int64 else _np.float32
        result = from_numpy(_np.array(array, dtype=numpy_type, copy=True, order="C"))
    if dtype is not None and result.dtype != dtype:
        result = result.to(dtype)
    if requires_grad:
        result.requires_grad = True
    return result


class no_grad:
    """Records no autograd history inside the block (as torch.no_grad); also a decorator."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, function):
        def wrapper(*args, **kwargs):
            with no_grad():
                return function(*args, **kwargs)

        wrapper.__name__ = getattr(function, "__name__", "wrapper")
        wrapper.__doc__ = getattr(function, "__doc__", None)
        return wrapper


def save(obj, path, metadata=None):
    """Writes a Module's state_dict, or a mapping of name -> tensor, as one safetensors file (atomically)."""
    if hasattr(obj, "state_dict") and not isinstance(obj, dict):
        obj = obj.state_dict()
    items = list(obj.items())
    for name, value in items:
        if not isinstance(value, Tensor):
            raise TypeError(f"tessera.save: '{name}' is a {type(value).__name__}, not a tessera.Tensor")
    _train_native._save(items, str(path), {str(k): str(v) for k, v in (metadata or {}).items()})


def load(path, with_metadata=False):
    """Reads a safetensors file (checksums verified) into an OrderedDict of name -> tensor."""
    import collections

    tensors, metadata = _train_native._load(str(path))
    state = collections.OrderedDict(tensors)
    return (state, metadata) if with_metadata else state


from . import autograd, cuda, data, distributed, nn, observe, optim, serve, train  # noqa: E402,F401

__all__ = [name for name in dir() if not name.startswith("_") and True]
