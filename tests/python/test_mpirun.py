"""The same Python job under Open MPI's mpirun: init_process_group finds its rank from MPI."""
import shutil

import pytest

from conftest import python_args, run


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_every_collective_under_mpirun():
    code, out = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp",
                     *python_args("tests/python/collectives_job.py")], timeout=180)
    assert code == 0, out
    assert "rank 0 ok" in out and "rank 1 ok" in out, out
