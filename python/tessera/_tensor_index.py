"""Tensor indexing (t[0], t[:, 1:3], t[..., None], t[idx_tensor]) as views, and assignment into them.

Written in Python over the C++ views (slice, squeeze, unsqueeze, index_select): each index item is
one view op, so autograd records the same graph as the equivalent calls."""


def _normalise(index):
    return index if isinstance(index, tuple) else (index,)


def getitem(t, index):
    from . import index_select, int64, Tensor

    items = _normalise(index)
    consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consuming > t.ndim:
        raise IndexError(f"too many indices for a tensor of dimension {t.ndim}: {consuming}")
    result, d = t, 0
    for item in items:
        if item is Ellipsis:
            d += t.ndim - consuming
        elif item is None:
            result = result.unsqueeze(d)
            d += 1
        elif isinstance(item, bool):
            raise TypeError("boolean indices are not supported; use a mask with tessera.where")
        elif isinstance(item, int):
            size = result.shape[d]
            i = item + size if item < 0 else item
            if not 0 <= i < size:
                raise IndexError(f"index {item} is out of bounds for dimension {d} with size {size}")
            result = result.slice(d, i, i + 1).squeeze(d)
        elif isinstance(item, slice):
            start, stop, step = item.indices(result.shape[d])
            if step <= 0:
                raise ValueError(f"slice step must be positive, got {step}")
            result = result.slice(d, start, max(start, stop), step)
            d += 1
        elif isinstance(item, Tensor) and item.dtype == int64 and item.ndim <= 1:
            result = index_select(result, d, item.reshape(-1))
            if item.ndim == 0:
                result = result.squeeze(d)
            else:
                d += 1
        else:
            raise TypeError(f"unsupported index {item!r}: use integers, slices, None, ... or a 1-d int64 tensor")
    return result


def setitem(t, index, value):
    from . import Tensor

    view = getitem(t, index)
    if isinstance(value, Tensor):
        view.copy_(value)
    else:
        view.fill_(float(value))


def install(tensor_class):
    tensor_class.__getitem__ = getitem
    tensor_class.__setitem__ = setitem
