"""Fashion-MNIST for the Python references of the benches (bench/ray_train.py, ray_tune.py), read from
the IDX files the trainer reads and normalised as tessera's loader normalises it (data/dataset.h:
(pixel / 255 - mean) / std, what transforms.Normalize((0.2860,), (0.3530,)) does)."""
import gzip
import os

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def split(train, flat):
    """(images float32 normalised, labels int64) of the training or test split; images (N, 784) when
    `flat`, else (N, 1, 28, 28)."""
    prefix = "train" if train else "t10k"
    images = (read_idx(f"{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0 - MEAN) / STD
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return images.reshape(-1, 784) if flat else images.reshape(-1, 1, 28, 28), labels
