"""tessera.optim: SGD, Adam, AdamW, LAMB, LARS (torch.optim's arguments) and lr_scheduler."""
from .._tessera import optim as _native
from . import lr_scheduler  # noqa: F401
from .grad_scaler import GradScaler

Optimizer = _native.Optimizer
SGD = _native.SGD
Adam = _native.Adam
AdamW = _native.AdamW
LAMB = _native.LAMB
LARS = _native.LARS
clip_grad_norm_ = _native.clip_grad_norm_

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LAMB", "LARS", "clip_grad_norm_", "GradScaler", "lr_scheduler"]
