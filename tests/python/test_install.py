"""`pip install --no-build-isolation .` (offline): the installed package imports and trains from any
directory. The build reuses this suite's CMake build directory (TESSERA_CMAKE_BUILD_DIR), so only
the install steps run here; a fresh checkout builds the same target in build-pip/."""
import os
import shutil
import sys

import pytest

from conftest import REPO, run


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_pip_install_then_import_elsewhere(tessera_bin, tmp_path):
    target = tmp_path / "site"
    code, out = run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                     "--target", str(target), REPO],
                    env={"TESSERA_CMAKE_BUILD_DIR": os.path.dirname(tessera_bin), "PIP_NO_CACHE_DIR": "1"}, timeout=900)
    assert code == 0, out
    assert (target / "tessera" / "nn" / "functional.py").exists()
    script = ("import tessera\n"
              "from tessera import nn, optim\n"
              "assert tessera.__file__.startswith(%r), tessera.__file__\n"
              "m = nn.Linear(3, 1)\n"
              "opt = optim.SGD(m.parameters(), lr=0.1)\n"
              "x = tessera.randn(16, 3)\n"
              "for _ in range(50):\n"
              "    loss = nn.functional.mse_loss(m(x), x.sum(dim=1, keepdim=True))\n"
              "    opt.zero_grad(); loss.backward(); opt.step()\n"
              "print('installed ok', loss.item() < 0.05)\n") % str(target)
    code, out = run([sys.executable, "-c", script], cwd=str(tmp_path), env={"PYTHONPATH": str(target)})
    assert code == 0, out
    assert "installed ok True" in out, out
