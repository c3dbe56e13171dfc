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
