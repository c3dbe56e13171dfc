"""tessera.cuda: whether this process can use a CUDA device, as torch.cuda says it.

tessera.cuda.is_available() is False on a machine without an NVIDIA GPU and driver, or in a build
without the CUDA backend; unavailable_reason() says which.
"""
from ._tessera import _allow_tf32, _cuda_device_count, _cuda_unavailable_reason, _set_allow_tf32


def device_count():
    """The CUDA devices this process sees (CUDA_VISIBLE_DEVICES chooses them)."""
    return _cuda_device_count()


def is_available():
    return _cuda_device_count() > 0


def unavailable_reason():
    """Why no CUDA device is usable here ("" when one is)."""
    return _cuda_unavailable_reason()


def set_allow_tf32(allow):
    """Let float32 matrix products and convolutions on a GPU use TF32 tensor cores (off by default,
    as torch.backends.cuda.matmul.allow_tf32; train.allow_tf32 in a config)."""
    _set_allow_tf32(bool(allow))


def allow_tf32():
    return _allow_tf32()
