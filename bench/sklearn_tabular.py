#!/usr/bin/python3
"""scikit-learn on the table examples/cpp/tabular.cpp trains on, for the comparison in
docs/workloads.md: logistic regression (no penalty, as the example's plain gradient descent) and
k-means from the same 3 initial centroids (the first rows of the first partition, n_init=1).

    /usr/bin/python3 bench/sklearn_tabular.py OUT/tabular-data OUT/tabular-result.safetensors

Debian's python3-sklearn (scripts/setup.sh --bench installs it)."""
import glob
import json
import struct
import sys

import numpy as np
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression


def table(directory):
    parts = [np.loadtxt(f, delimiter=",", skiprows=1) for f in sorted(glob.glob(directory + "/*.csv"))]
    data = np.concatenate(parts)
    return data[:, :-1], data[:, -1].astype(int), parts[0][:3, :-1]


def safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def main():
    data_dir, result = sys.argv[1], sys.argv[2]
    x, y, init = table(data_dir + "/train")
    xt, yt, _ = table(data_dir + "/test")
    ours = safetensors(result)
    logistic = LogisticRegression(penalty=None, max_iter=1000).fit(x, y)
    our_accuracy = float(((xt @ ours["weight"].T + ours["bias"]).argmax(1) == yt).mean())
    km = KMeans(n_clusters=3, init=init, n_init=1).fit(x)
    shift = float(np.abs(km.cluster_centers_ - ours["centroids"]).max())
    our_inertia = float(((x[:, None, :] - ours["centroids"][None]) ** 2).sum(-1).min(1).sum())
    print(f"logistic regression test accuracy: scikit-learn {logistic.score(xt, yt):.4f}, tessera {our_accuracy:.4f}")
    print(f"k-means inertia: scikit-learn {km.inertia_:.3f} after {km.n_iter_} iterations, tessera {our_inertia:.3f}; "
          f"largest centroid difference {shift:.2e}")


if __name__ == "__main__":
    main()
