"""tessera.ray: tessera jobs on a real Ray cluster (a local one here; test_ray_cluster.py puts one on
test hosts). Needs Ray: scripts/setup.sh installs it into .venv-ray, whose Python runs this file."""
import importlib.util
import os
import secrets
import shutil
import sys
import tempfile

import pytest

from conftest import REPO, run

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed here: bash scripts/setup.sh puts it in .venv-ray", allow_module_level=True)
# The cluster's files (logs, sockets) and its authentication token in a directory of this test's,
# removed at the end: nothing is left in /tmp/ray or the user's ~/.ray. Its path stays short (Ray's
# Unix sockets live there). Ray reads its token's variables when it is imported, so they are set
# first; the CLI test's driver inherits them.
SCRATCH = tempfile.mkdtemp(prefix="tr-", dir="/tmp")
TOKEN = os.path.join(SCRATCH, "token")
with open(os.open(TOKEN, os.O_CREAT | os.O_WRONLY, 0o600), "w", encoding="ascii") as token_file:
    token_file.write(secrets.token_hex(32))
os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": TOKEN})
import ray  # noqa: E402

import tessera  # noqa: E402
from tessera.ray import TesseraTrainer, TrainingFailedError  # noqa: E402
from ray_functions import all_reduce_of_ranks, always_fails  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    # 4 logical CPUs on this 2-core machine: 2 workers of CPU=1 and room for a restart's actors.
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=100 * 1024 * 1024, log_to_driver=False,
             _temp_dir=SCRATCH)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(SCRATCH, ignore_errors=True)


def mlp_config(tmp_path, name, extra=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
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
max_steps = 12
checkpoint_every = 4
seed = 3
threads = 1
log_every = 4
output_dir = "{tmp_path / name}"
{extra}
""")
    return str(path)


def final_weights(checkpoint):
    return {k: v.numpy() for k, v in tessera.load(os.path.join(checkpoint, "model.safetensors")).items()}


def assert_close(a, b, tolerance):
    assert a.keys() == b.keys()
    for key in a:
        diff = abs(a[key] - b[key]).max()
        assert diff <= tolerance, f"{key}: {diff}"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, tessera_bin_path):
    tmp = tmp_path_factory.mktemp("one")
    code, out = run([tessera_bin_path, "train", mlp_config(tmp, "one")])
    assert code == 0, out
    return final_weights(str(tmp / "one" / "checkpoints" / "step-00000012"))


@pytest.fixture(scope="module")
def tessera_bin_path():
    return os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "tessera"))


def test_a_config_on_two_ray_workers_equals_one_process(ray_cluster, tmp_path, one_process):
    reports = []
    result = TesseraTrainer(config=mlp_config(tmp_path, "ddp"), num_workers=2, placement_strategy="SPREAD",
                            on_report=reports.append, verbose=False).fit()
    assert result.attempts == 1 and result.failures == []
    assert result.checkpoint.endswith("step-00000012")
    steps = [r["step"] for r in result.metrics_history if r["type"] == "step"]
    assert steps == list(range(1, 13))  # rank 0's every step, streamed
    assert reports == [{k: v for k, v in r.items()} for r in result.metrics_history]
    assert result.seconds_to_first_report > 0
    # DDP over 2 ranks at the same global batch: the one-process run's weights, to rounding.
    assert_close(final_weights(result.checkpoint), one_process, 1e-5)


def test_a_killed_worker_restarts_the_group_with_no_step_lost(ray_cluster, tmp_path, one_process):
    # Worker 1 kills itself (SIGKILL) after step 7, between the scheduled checkpoints of steps 4 and 8:
    # the survivor saves step 7 from memory, and the restarted group goes on from there.
    config = mlp_config(tmp_path, "killed", "[distributed]\ndebug_kill_rank = 1\ndebug_kill_step = 7\n")
    result = TesseraTrainer(config=config, num_workers=2, placement_strategy="SPREAD", max_failures=1,
                            verbose=False).fit()
    assert result.attempts == 2, result.failures
    assert "rank 1" in result.failures[0] or "rank 0" in result.failures[0], result.failures
    assert result.steps_lost == [0] and len(result.restart_seconds) == 1 and result.restart_seconds[0] > 0
    restart = [r for r in result.metrics_history if r["attempt"] == 1]
    assert restart[0]["type"] == "start" and restart[0]["resumed"] and restart[0]["step"] == 7
    assert [r["step"] for r in restart[1:]] == list(range(8, 13))
    assert_close(final_weights(result.checkpoint), one_process, 1e-5)


def test_a_python_function_joins_reports_returns_and_is_restarted(ray_cluster):
    result = TesseraTrainer(all_reduce_of_ranks, train_loop_config={"fail_rank": 1}, num_workers=2,
                            max_failures=2, verbose=False).fit()
    assert result.attempts == 2
    assert "rank 1 exited with status 1" in result.failures[0] and "planned failure" in result.failures[0]
    assert result.return_values == [{"rank": r, "sum": [3.0, 3.0, 3.0], "attempt": 1} for r in range(2)]
    assert result.metrics["sum"] == 3.0 and result.metrics["world"] == 2 and result.metrics["attempt"] == 1


def test_failures_beyond_max_failures_end_the_job_naming_the_rank(ray_cluster):
    with pytest.raises(TrainingFailedError,
                       match=r"2 failures, max_failures = 1\): rank 0 exited with status 1(.|\n)*always fails"):
        TesseraTrainer(always_fails, train_loop_config={}, num_workers=1, max_failures=1, verbose=False).fit()


def test_bad_options_and_impossible_placements_say_what_is_wrong(ray_cluster, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        TesseraTrainer()
    with pytest.raises(ValueError, match="num_workers"):
        TesseraTrainer(all_reduce_of_ranks, num_workers=0)
    with pytest.raises(ValueError, match="placement_strategy 'ANYWHERE'"):
        TesseraTrainer(all_reduce_of_ranks, placement_strategy="ANYWHERE")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nbatch_sise = 3\n")
    with pytest.raises(ValueError, match="batch_sise"):
        TesseraTrainer(config=str(bad))
    with pytest.raises(TrainingFailedError, match="could not be placed"):
        TesseraTrainer(all_reduce_of_ranks, num_workers=2, resources_per_worker={"CPU": 64},
                       placement_timeout_s=3, verbose=False).fit()


def test_tessera_train_launcher_ray_from_the_cli(ray_cluster, tmp_path, tessera_bin_path, one_process):
    code, out = run([tessera_bin_path, "train", mlp_config(tmp_path, "cli"), "--launcher", "ray", "--nproc", "2",
                     "--address", ray_cluster], env={"TESSERA_PYTHON": sys.executable})
    assert code == 0, out
    assert "2 workers started" in out and "[rank 0] epoch 1/1 step 12" in out, out
    assert "done after 1 attempt(s)" in out, out
    assert_close(final_weights(str(tmp_path / "cli" / "checkpoints" / "step-00000012")), one_process, 1e-5)
