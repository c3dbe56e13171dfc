"""tessera.nn.functional: the ops as functions (torch.nn.functional's names and arguments)."""
from .._tessera import nn as _native_nn

globals().update({name: getattr(_native_nn.functional, name)
                  for name in dir(_native_nn.functional) if not name.startswith("_")})
__all__ = [name for name in dir(_native_nn.functional) if not name.startswith("_")]
