"""tessera.data from Python: the loader over tensors and over a dataset written in Python."""
import threading

import numpy as np
import pytest

import tessera
from tessera.data import DataLoader, Dataset, DistributedSampler, TensorDataset


def small_dataset(n=10):
    return TensorDataset(tessera.arange(n).float().reshape(n, 1), tessera.arange(n))


def test_batches_in_order_and_the_last_one_short():
    batches = [(x.numpy().ravel().tolist(), y.tolist()) for x, y in DataLoader(small_dataset(), batch_size=4)]
    assert [b[1] for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(DataLoader(small_dataset(), batch_size=4, drop_last=True)) == 2


def test_shuffle_reshuffles_each_epoch_and_repeats_with_the_seed():
    def epochs(seed):
        loader = DataLoader(small_dataset(), batch_size=10, shuffle=True, seed=seed)
        return [next(iter(loader))[1].tolist() for _ in range(2)]

    first, second = epochs(3)
    assert sorted(first) == list(range(10)) and first != second
    assert epochs(3) == [first, second]


def test_distributed_sampler_splits_without_overlap():
    ds = small_dataset()
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=5)
        sampler.set_epoch(1)
        seen += [i for _, y in DataLoader(ds, batch_size=3, sampler=sampler) for i in y.tolist()]
    assert sorted(seen) == list(range(10))


class Squares(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return np.array([i, i * i], dtype=np.float32), i % 2


def test_a_dataset_written_in_python():
    batches = list(DataLoader(Squares(), batch_size=4))
    assert batches[0][0].tolist() == [[0, 0], [1, 1], [2, 4], [3, 9]]
    assert batches[0][1].dtype == tessera.int64 and batches[1][1].tolist() == [0, 1]


class Broken(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            raise KeyError("sample 2 is missing")
        return [float(i)], i


def test_an_error_in_getitem_reaches_the_caller():
    with pytest.raises(Exception, match="sample 2 is missing"):
        list(DataLoader(Broken(), batch_size=1))


class Gated(Dataset):
    """__getitem__ waits for an event another Python thread sets: only possible while the loader's
    wait releases the GIL."""

    def __init__(self):
        self.go = threading.Event()

    def __len__(self):
        return 2

    def __getitem__(self, i):
        if not self.go.wait(timeout=30):
            raise TimeoutError("the gate was never opened")
        return [float(i)], i


def test_the_loader_releases_the_gil_while_it_waits():
    ds = Gated()
    loader = iter(DataLoader(ds, batch_size=2, timeout=60))
    opener = threading.Thread(target=ds.go.set)
    opener.start()
    x, y = next(loader)
    opener.join()
    assert y.tolist() == [0, 1]


def test_a_stalled_loader_times_out_with_a_timeout_error():
    ds = Gated()
    loader = DataLoader(ds, batch_size=1, timeout=0.2)
    try:
        with pytest.raises(TimeoutError, match="DataLoader"):
            next(iter(loader))
    finally:
        ds.go.set()  # lets the loader's thread finish before the loader (which joins it) goes
    del loader


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(small_dataset(), batch_size=0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(small_dataset(), shuffle=True, sampler=DistributedSampler(small_dataset(), num_replicas=1, rank=0))
    with pytest.raises(ValueError, match="__getitem__"):
        DataLoader(object())
