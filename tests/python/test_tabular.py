"""Tables from Python: load_csv, logistic regression, and k-means against NumPy's Lloyd iterations."""
import numpy as np
import pytest

import tessera
import tessera.distributed as dist
from tessera import nn, optim
from tessera.data import DataLoader, PaddedRandomSampler, StreamingCsv, load_csv


def write_blobs(path, rows, seed):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    labels = rng.integers(0, 3, rows)
    points = centres[labels] + rng.standard_normal((rows, 2))
    with open(path, "w") as f:
        f.write("a,b,label\n")
        for (x, y), c in zip(points, labels):
            f.write(f"{x},{y},{c}\n")
    return points.astype(np.float32), labels


def test_logistic_regression_on_a_csv_table(tmp_path):
    write_blobs(tmp_path / "train.csv", 600, 1)
    write_blobs(tmp_path / "test.csv", 300, 2)
    train, columns = load_csv(str(tmp_path / "train.csv"))
    test, _ = load_csv([str(tmp_path / "test.csv")])
    assert columns == ["a", "b"] and len(train) == 600
    tessera.manual_seed(0)
    model = nn.Linear(2, 3)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(5):
        for x, y in DataLoader(train, batch_size=32, shuffle=True, seed=epoch):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with tessera.no_grad():
        accuracy = model(test.inputs).argmax(dim=1).eq(test.targets).mean().item()
    assert accuracy > 0.95


def test_a_missing_value_names_its_line(tmp_path):
    (tmp_path / "bad.csv").write_text("a,label\n1,0\n,1\n")
    with pytest.raises(OSError, match=r"bad.csv:3: column \"a\""):
        load_csv(str(tmp_path / "bad.csv"))


def test_a_streamed_table_read_in_shares_equals_the_loaded_one(tmp_path):
    points, labels = write_blobs(tmp_path / "s.csv", 500, 4)
    rows, seen = [], []
    for rank in range(3):
        share = StreamingCsv(str(tmp_path / "s.csv"), rank=rank, world=3)
        assert share.feature_columns == ["a", "b"]
        rows += [share[i][0].numpy() for i in range(len(share))]
        seen += [int(share[i][1].item()) for i in range(len(share))]
    np.testing.assert_array_equal(np.stack(rows), points)
    assert seen == list(labels)
    whole = StreamingCsv(str(tmp_path / "s.csv"))
    batches = list(DataLoader(whole, batch_size=64, sampler=PaddedRandomSampler(whole, seed=1)))
    assert sum(len(y) for _, y in batches) == 500
    (tmp_path / "bad.csv").write_text("a,label\n1,0\n,1\n")
    with pytest.raises(OSError, match=r"bad.csv:3: column \"a\""):
        StreamingCsv(str(tmp_path / "bad.csv"))


def test_kmeans_matches_lloyds_iterations_in_numpy(tmp_path):
    points, _ = write_blobs(tmp_path / "k.csv", 300, 3)
    init = points[:3].copy()
    result = dist.kmeans(tessera.from_numpy(points), tessera.from_numpy(init), max_iterations=100, tolerance=0.0)
    c = init.astype(np.float64)
    for _ in range(result["iterations"]):
        labels = ((points[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        c = np.stack([points[labels == k].mean(0) if (labels == k).any() else c[k] for k in range(3)])
    np.testing.assert_allclose(result["centroids"].numpy(), c, rtol=1e-4, atol=1e-4)


def test_an_image_folder_from_python(tmp_path):
    import struct
    import zlib

    def png(path, value):  # a 4x4 gray PNG written by hand (no imaging library needed)
        raw = b"".join(b"\x00" + bytes([value] * 4) for _ in range(4))
        chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 0, 0, 0, 0)) +
                         chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    for name, value in (("dark", 10), ("light", 250)):
        (tmp_path / name).mkdir()
        png(tmp_path / name / "a.png", value)
    images = tessera.data.ImageFolder(str(tmp_path))
    assert images.classes == ["dark", "light"] and len(images) == 2
    x, y = next(iter(DataLoader(images, batch_size=2)))
    assert x.shape == (2, 1, 4, 4) and y.tolist() == [0, 1]
    assert abs(x[1, 0, 0, 0].item() - 250 / 255) < 1e-6
