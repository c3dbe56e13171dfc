"""tessera.optim.lr_scheduler: StepLR, CosineAnnealingLR, LinearWarmupLR; call step() once per step."""
from .._tessera import optim as _native

LRScheduler = _native.lr_scheduler.LRScheduler
StepLR = _native.lr_scheduler.StepLR
CosineAnnealingLR = _native.lr_scheduler.CosineAnnealingLR
LinearWarmupLR = _native.lr_scheduler.LinearWarmupLR

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmupLR"]
