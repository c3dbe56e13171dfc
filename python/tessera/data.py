"""tessera.data: datasets, samplers and DataLoader (torch.utils.data's names).

A dataset of your own is any object with __len__ and __getitem__(i) -> (input, target), as in
PyTorch; the loader's C++ thread assembles batches ahead (taking the GIL for __getitem__ only)."""
from ._tessera import data as _native

TensorDataset = _native.TensorDataset
FashionMNIST = _native.FashionMNIST
synthetic_classification = _native.synthetic_classification
Sampler = _native.Sampler
SequentialSampler = _native.SequentialSampler
RandomSampler = _native.RandomSampler
DistributedSampler = _native.DistributedSampler
DataLoader = _native.DataLoader
ClipTextDataset = _native.ClipTextDataset
load_clip_text = _native.load_clip_text
write_synthetic_clip_text = _native.write_synthetic_clip_text
ImageFolder = _native.ImageFolder
load_csv = _native.load_csv
csv_files = _native.csv_files
StreamingCsv = _native.StreamingCsv
PaddedRandomSampler = _native.PaddedRandomSampler
csv_partition_of = _native.csv_partition_of


class Dataset:
    """Base class for map-style datasets: define __len__ and __getitem__(i) -> (input, target)."""

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


__all__ = ["Dataset", "TensorDataset", "FashionMNIST", "synthetic_classification", "Sampler", "SequentialSampler",
           "RandomSampler", "DistributedSampler", "DataLoader", "ClipTextDataset", "load_clip_text",
           "write_synthetic_clip_text", "ImageFolder", "load_csv", "csv_files", "csv_partition_of", "StreamingCsv",
           "PaddedRandomSampler"]
