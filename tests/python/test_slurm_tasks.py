"""A Python script as the tasks of an srun step: two processes given the variables srun sets in a
2-task step on one node join one job (rank 0 hosts the store), with no Slurm installed."""
import os
import subprocess

from conftest import REPO, python_args


def task_env(rank, job):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TESSERA_ROLE", "MASTER_ADDR",
                                                              "MASTER_PORT")}
    env.update({"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NNODES": "1",
                "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": "2",
                "TESSERA_JOB_TOKEN": "0123456789abcdef0123456789abcdef", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def test_every_collective_as_two_srun_tasks():
    job = str(os.getpid())  # a job id (and so a port) of this test's own
    tasks = [subprocess.Popen(python_args("tests/python/collectives_job.py"), cwd=REPO, env=task_env(r, job),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = []
    try:
        for task in tasks:
            out, _ = task.communicate(timeout=120)
            outputs.append((task.returncode, out))
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()
                task.wait()
    for rank, (code, out) in enumerate(outputs):
        assert code == 0, out
        assert f"rank {rank} ok" in out, out
