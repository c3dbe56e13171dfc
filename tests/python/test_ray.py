"""tessera.ray: tessera jobs on a real Ray cluster (a local one here; test_ray_cluster.py puts one on
test hosts). Needs Ray: scripts/setup.sh installs it into .venv-ray, whose Python runs this file."""
import importlib.util
import json
import os
import secrets
import shutil
import sys
import tempfile

import pytest

from conftest import REPO, assert_weights_close, checkpoint_weights, mlp_toml, run

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

from tessera.ray import TesseraTrainer, TrainingFailedError  # noqa: E402
from ray_functions import all_reduce_of_ranks, always_fails  # noqa: E402


TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "tessera"))


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
    return mlp_toml(tmp_path, name, extra=extra)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    code, out = run([TESSERA, "train", mlp_config(tmp, "one")])
    assert code == 0, out
    return checkpoint_weights(str(tmp / "one" / "checkpoints" / "step-00000012"))


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
    assert_weights_close(checkpoint_weights(result.checkpoint), one_process, 1e-5)


def test_a_killed_worker_restarts_the_group_with_no_step_lost(ray_cluster, tmp_path, one_process):
    # Worker 1 kills itself (SIGKILL) after step 7, between the scheduled checkpoints of steps 4 and 8:
    # the survivor saves step 7 from memory, and the restarted group goes on from there.
    config = mlp_config(tmp_path, "killed", "[distributed]\ndebug_kill_rank = 1\ndebug_kill_step = 7\n")
    result = TesseraTrainer(config=config, num_workers=2, placement_strategy="SPREAD", max_failures=1,
                            verbose=False).fit()
    assert result.attempts == 2, result.failures
    # The killed rank is blamed, not the survivor that stopped because of it.
    # (Rank 0 then failed its collective on the lost peer, saved, and exited 1, or was asked to save and
    # exited 75, or was still saving.)
    assert result.failures[0].startswith("rank 1 exited with status 137 (killed by SIGKILL) (then rank 0: "), \
        result.failures
    assert result.steps_lost == [0] and len(result.restart_seconds) == 1 and 0 < result.restart_seconds[0] < 60
    restart = [r for r in result.metrics_history if r["attempt"] == 1]
    assert restart[0]["type"] == "start" and restart[0]["resumed"] and restart[0]["step"] == 7
    assert [r["step"] for r in restart[1:]] == list(range(8, 13))
    assert_weights_close(checkpoint_weights(result.checkpoint), one_process, 1e-5)


def test_a_python_function_joins_reports_returns_and_is_restarted(ray_cluster):
    # (1, 2) workers: as many as the cluster holds, 2 here, on each attempt.
    result = TesseraTrainer(all_reduce_of_ranks, train_loop_config={"fail_rank": 1}, num_workers=(1, 2),
                            max_failures=2, verbose=False).fit()
    assert result.attempts == 2 and result.world_sizes == [2, 2]
    assert "rank 1 exited with status 1" in result.failures[0] and "planned failure" in result.failures[0]
    assert result.return_values == [{"rank": r, "sum": [3.0, 3.0, 3.0], "attempt": 1} for r in range(2)]
    assert result.metrics["sum"] == 3.0 and result.metrics["world"] == 2 and result.metrics["attempt"] == 1
    assert [m["rank"] for m in result.metrics_by_rank] == [0, 1]  # every rank's reports reach the driver


def test_failures_beyond_max_failures_end_the_job_naming_the_rank(ray_cluster):
    with pytest.raises(TrainingFailedError,
                       match=r"2 failures, max_failures = 1\): rank 0 exited with status 1(.|\n)*always fails"):
        TesseraTrainer(always_fails, train_loop_config={}, num_workers=1, max_failures=1, verbose=False).fit()


def test_bad_options_and_impossible_placements_say_what_is_wrong(ray_cluster, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        TesseraTrainer()
    with pytest.raises(ValueError, match="num_workers"):
        TesseraTrainer(all_reduce_of_ranks, num_workers=0)
    with pytest.raises(ValueError, match=r"\(min, max\) with 1 <= min <= max"):
        TesseraTrainer(all_reduce_of_ranks, num_workers=(2, 1))
    with pytest.raises(ValueError, match="placement_strategy 'ANYWHERE'"):
        TesseraTrainer(all_reduce_of_ranks, placement_strategy="ANYWHERE")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nbatch_sise = 3\n")
    with pytest.raises(ValueError, match="batch_sise"):
        TesseraTrainer(config=str(bad))
    with pytest.raises(TrainingFailedError, match="could not be placed"):
        TesseraTrainer(all_reduce_of_ranks, num_workers=2, resources_per_worker={"CPU": 64},
                       placement_timeout_s=3, verbose=False).fit()


def test_tessera_train_launcher_ray_from_the_cli(ray_cluster, tmp_path, one_process):
    code, out = run([TESSERA, "train", mlp_config(tmp_path, "cli"), "--launcher", "ray", "--nproc", "2",
                     "--address", ray_cluster], env={"TESSERA_PYTHON": sys.executable})
    assert code == 0, out
    assert "2 workers started" in out and "[rank 0] epoch 1/1 step 12" in out, out
    assert "done after 1 attempt(s)" in out, out
    assert_weights_close(checkpoint_weights(str(tmp_path / "cli" / "checkpoints" / "step-00000012")), one_process, 1e-5)


def test_tessera_tune_backend_ray_runs_the_same_trials_as_ray_tune_trials(ray_cluster, tmp_path):
    base = tmp_path / "base.toml"
    base.write_text("""
[model]
name = "mlp"
hidden = [16]
[data]
dataset = "synthetic"
samples = 512
test_samples = 256
classes = 4
[optimizer]
name = "sgd"
lr = 0.1
[train]
epochs = 3
batch_size = 64
seed = 0
threads = 1
log_every = 1000
""")
    space = tmp_path / "space.toml"
    space.write_text("[optimizer.lr]\nlog_uniform = [0.001, 0.5]\n[model.hidden]\nchoice = [[8], [16]]\n")
    search = [TESSERA, "tune", str(base), "--space", str(space), "--trials", "6", "--parallel", "2"]
    code, out = run(search + ["--scheduler", "none", "--out", str(tmp_path / "local")])
    assert code == 0, out
    with open(tmp_path / "local" / "tune.jsonl") as f:
        local = {r["trial"]: r["metric"] for r in map(json.loads, f)}
    on_ray = {"TESSERA_PYTHON": sys.executable}
    code, out = run(search + ["--backend", "ray", "--address", ray_cluster, "--out", str(tmp_path / "ray")], env=on_ray)
    assert code == 0, out
    assert "tune: best trial" in out, out
    with open(tmp_path / "ray" / "ray-results.jsonl") as f:
        trials = [json.loads(line) for line in f]
    assert [t["trial"] for t in trials] == list(range(6)) and all(t["status"] == "ok" for t in trials), trials
    # The same draws and the same trainer: a trial that ran its 3 epochs reached the local run's metric
    # exactly; ASHA (eta 3, rungs of 1 and 3 epochs) stopped some after 1.
    finished = [t for t in trials if t["epochs"] == 3]
    assert finished and len(finished) < 6, trials
    for t in finished:
        assert t["metric"] == local[t["trial"]], (t, local)
    best = max(finished, key=lambda t: t["metric"])
    assert f"best trial {best['trial']} " in out, out
