"""Shared by the Python tests (ctest runs each file with PYTHONPATH=build/python and TESSERA_BIN set)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def tessera_bin():
    path = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "tessera"))
    if not os.path.exists(path):
        pytest.fail(f"the tessera binary is not at {path}: build it, or set TESSERA_BIN")
    return path


def run(args, timeout=240, cwd=None, env=None):
    """Runs a command to completion (bounded by `timeout`); returns (exit code, stdout + stderr)."""
    merged = dict(os.environ)
    merged.update(env or {})
    merged.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    proc = subprocess.run(args, cwd=cwd or REPO, env=merged, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, text=True)
    return proc.returncode, proc.stdout


def python_args(script, *args):
    return [sys.executable, os.path.join(REPO, script), *args]


def mlp_toml(directory, name, steps=12, checkpoint_every=4, log_every=4, extra=""):
    """Writes DIRECTORY/NAME.toml: the small MLP on Fashion-MNIST at a global batch of 64 (so any world
    size trains what one process does) for `steps` steps, into DIRECTORY/NAME; returns its path."""
    path = os.path.join(str(directory), f"{name}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"""
[model]
name = "mlp"
hidden = [32]
[data]
dataset = "fashion-mnist"
dir = "/usr/share/datasets/fashion-mnist"
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
[train]
epochs = 1
global_batch_size = 64
max_steps = {steps}
checkpoint_every = {checkpoint_every}
seed = 3
threads = 1
log_every = {log_every}
output_dir = "{os.path.join(str(directory), name)}"
{extra}
""")
    return path


def checkpoint_weights(step_dir):
    """A checkpoint's model tensors as NumPy arrays."""
    import tessera
    return {k: v.numpy() for k, v in tessera.load(os.path.join(step_dir, "model.safetensors")).items()}


def assert_weights_close(a, b, tolerance):
    assert a.keys() == b.keys()
    for key in a:
        diff = abs(a[key] - b[key]).max()
        assert diff <= tolerance, f"{key}: {diff}"
