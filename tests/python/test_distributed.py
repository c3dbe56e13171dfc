"""tessera.distributed from Python, in real processes started by `tessera run`."""
import os

import numpy as np
import pytest

import tessera
from conftest import REPO, python_args, run


def test_every_collective_under_tessera_run(tessera_bin):
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("tests/python/collectives_job.py")])
    assert code == 0, out
    assert "rank 0 ok" in out and "rank 1 ok" in out, out


def test_tensor_parallel_layers_on_a_device_mesh(tessera_bin):
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("tests/python/tensor_parallel_job.py")])
    assert code == 0, out
    assert "rank 0 tensor-parallel ok" in out and "rank 1 tensor-parallel ok" in out, out
    assert "rank 0 sequence-parallel ok" in out and "rank 1 sequence-parallel ok" in out, out


def test_spread_experts_and_cut_sequences_from_python_equal_the_whole_layers(tessera_bin):
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("tests/python/experts_and_context_job.py")])
    assert code == 0, out
    for rank in (0, 1):
        for what in ("experts", "context ring", "context ulysses"):
            assert f"rank {rank} {what} ok" in out, out


def test_a_lost_peer_is_a_python_exception_naming_it(tessera_bin):
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("tests/python/lost_peer_job.py")], timeout=120)
    assert "rank 0 caught" in out, out
    assert "rank 1" in out.split("rank 0 caught", 1)[1], out


def test_ddp_from_python_equals_the_cxx_trainer_on_one_process(tessera_bin, tmp_path):
    """2 Python ranks × 32 samples against `tessera.train.run` (the C++ trainer) on one process with
    the global batch of 64: the same initialisation (seed 3), the same sample order (the trainer's
    DistributedSampler), SGD with momentum, 15 steps."""
    two = tmp_path / "two.safetensors"
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("examples/python/train_ddp.py", "--max-steps", "15", "--no-eval", "--lr", "0.05",
                                  "--seed", "3", "--batch-size", "32", "--save", str(two))])
    assert code == 0, out
    result = tessera.train.run({
        "model": {"name": "mlp", "hidden": [256]},
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "train": {"epochs": 1, "batch_size": 64, "seed": 3, "max_steps": 15, "output_dir": str(tmp_path / "cxx")},
    })
    assert result["steps"] == 15
    a = tessera.load(two)
    b = tessera.load(os.path.join(result["checkpoint"], "model.safetensors"))
    assert list(a.keys()) == list(b.keys())
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    # And not trivially: training moved the parameters away from their start.
    tessera.manual_seed(3)
    start = tessera.nn.Sequential(tessera.nn.Flatten(), tessera.nn.Linear(784, 256), tessera.nn.ReLU(),
                                  tessera.nn.Linear(256, 10)).state_dict()
    assert np.abs(a["1.weight"].numpy() - start["1.weight"].detach().numpy()).max() > 1e-3


@pytest.mark.parametrize("stage", [1, 3])
def test_zero_from_python_equals_one_process_on_the_global_batch(tessera_bin, tmp_path, stage):
    two, one = tmp_path / "two.safetensors", tmp_path / "one.safetensors"
    steps = ["--stage", str(stage), "--max-steps", "12"]
    # One OpenMP thread in every process (the launcher would give each rank cores / 2, the reference
    # would take them all).
    one_thread = {"OMP_NUM_THREADS": "1"}
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("examples/python/train_zero.py", *steps, "--batch-size", "32", "--save", str(two))],
                    env=one_thread)
    assert code == 0, out
    assert f"stage {stage}: 12 steps" in out, out
    code, out = run(python_args("examples/python/train_zero.py", *steps, "--batch-size", "64", "--save", str(one)),
                    env=one_thread)
    assert code == 0, out
    a, b = tessera.load(two), tessera.load(one)
    assert list(a.keys()) == list(b.keys())
    # Two ranks of 32 sum a gradient in another order than one process of 64. Adam divides each
    # gradient by its own running size, so where a weight's gradient is near zero (rounding is then
    # most of it) one step can move it by up to lr either way: the bound is 12 steps at 1% of lr (1e-3)
    # each, 1.2e-4, far below what a wrong shard or a missed step would change (a whole lr per step).
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-4, atol=1.2e-4, err_msg=name)
