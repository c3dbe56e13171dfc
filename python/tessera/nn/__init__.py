"""tessera.nn: Module, Parameter and the layers (torch.nn's names and arguments).

A Module subclass written in Python registers what it assigns to self: an nn.Parameter becomes a
parameter, a Module a child, in assignment order (state_dict keys are PyTorch's dotted paths)."""
from .._tessera import nn as _native
from . import functional  # noqa: F401

Module = _native.Module
Parameter = _native.Parameter
Linear = _native.Linear
Conv2d = _native.Conv2d
MaxPool2d = _native.MaxPool2d
AvgPool2d = _native.AvgPool2d
BatchNorm1d = _native.BatchNorm1d
BatchNorm2d = _native.BatchNorm2d
LayerNorm = _native.LayerNorm
Embedding = _native.Embedding
Dropout = _native.Dropout
ReLU = _native.ReLU
GELU = _native.GELU
Flatten = _native.Flatten
Sequential = _native.Sequential
CausalSelfAttention = _native.CausalSelfAttention
TransformerBlock = _native.TransformerBlock
MixtureOfExperts = _native.MixtureOfExperts
VideoEncoder = _native.VideoEncoder
TextEncoder = _native.TextEncoder
text_to_video_retrieval = _native.text_to_video_retrieval
make_mlp = _native.make_mlp
make_cnn = _native.make_cnn


class ModuleList(Module):
    """Children registered as "0", "1", ... (torch.nn.ModuleList); iterate and index it."""

    def __init__(self, modules=()):
        super().__init__()
        self._items = []
        for module in modules:
            self.append(module)

    def append(self, module):
        setattr(self, str(len(self._items)), module)
        self._items.append(module)
        return self

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]


class Identity(Module):
    def forward(self, x):
        return x


class CrossEntropyLoss(Module):
    def __init__(self, ignore_index=-100, label_smoothing=0.0):
        super().__init__()
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return functional.cross_entropy(input, target, self.ignore_index, self.label_smoothing)


class MSELoss(Module):
    def forward(self, input, target):
        return functional.mse_loss(input, target)


__all__ = [name for name in dir() if not name.startswith("_")]
