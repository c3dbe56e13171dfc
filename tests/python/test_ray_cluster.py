"""tessera.ray on a real Ray cluster across test hosts (scripts/cluster.sh): `ray start --head` in host1,
`ray start --address` in host2, the driver in host1. DDP across the two hosts equals one process, and a
host lost mid-run ends in a restarted, resumed job with no step lost. Needs root (the hosts) and Ray."""
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from conftest import REPO, assert_weights_close, checkpoint_weights, mlp_toml, run

pytest.importorskip("ray", reason="Ray is not installed here: bash scripts/setup.sh puts it in .venv-ray")


CLUSTER = "rayt"  # this file's own test hosts (TESSERA_CLUSTER), apart from the C++ suite's
HEAD = "198.18.0.1:6379"
TESSERA = os.environ.get("TESSERA_BIN", os.path.join(REPO, "build", "tessera"))
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
# Ray notices a lost node after health_check_period_ms x health_check_failure_threshold (30 s by default).
RAY_NODE_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
                   "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000"}


# This test's own directory (made private by mkdtemp, removed at the end): the cluster's token (Ray's
# token authentication: every node and the driver present it), never the user's ~/.ray, and each node's
# temp directory (its logs and sockets, and its actors' scratch files, even a killed node's).
PRIVATE = tempfile.mkdtemp(prefix="trc-", dir="/tmp")
TOKEN_FILE = os.path.join(PRIVATE, "token")
RAY_AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": TOKEN_FILE}


def cluster(*args, timeout=120):
    return run(["bash", os.path.join(REPO, "scripts", "cluster.sh"), *args], timeout=timeout,
               env={"TESSERA_CLUSTER": CLUSTER})


def in_host(host, *command, timeout=120):
    return cluster("exec", host, *command, timeout=timeout)


def ray_start(host, *args):
    # Each node's own temp dir (logs, sockets): the hosts share this machine's /tmp.
    address = "198.18.0." + host[-1]
    node_dir = os.path.join(PRIVATE, host)
    os.mkdir(node_dir)
    settings = {**RAY_NODE_CHECKS, **RAY_AUTH, "TMPDIR": node_dir}
    code, out = in_host(host, "env", *[f"{k}={v}" for k, v in settings.items()], RAY, "start",
                        "--node-ip-address", address, "--num-cpus", "2", "--object-store-memory", "100000000",
                        "--disable-usage-stats", "--temp-dir", node_dir, *args)
    assert code == 0, out


@pytest.fixture(scope="module")
def ray_hosts():
    if os.geteuid() != 0 or shutil.which("nsenter") is None:
        shutil.rmtree(PRIVATE, ignore_errors=True)
        pytest.skip("the test hosts need root and nsenter (scripts/cluster.sh)")
    cluster("down")
    code, out = cluster("up", "2")
    if code != 0:
        cluster("down")
        shutil.rmtree(PRIVATE, ignore_errors=True)
        pytest.skip(f"test hosts cannot be made here: {out.strip()}")
    try:
        descriptor = os.open(TOKEN_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(descriptor, secrets.token_hex(32).encode())
        os.close(descriptor)
        ray_start("host1", "--head", "--port", "6379", "--include-dashboard=false")
        ray_start("host2", "--address", HEAD)
        yield
    finally:
        cluster("down")  # ends Ray's processes in the hosts with them
        shutil.rmtree(PRIVATE, ignore_errors=True)


def config(tmp_path, name, steps, extra=""):
    # A collective that waits 20 s for a peer is a lost peer (distributed.timeout_s).
    return mlp_toml(tmp_path, name, steps=steps, checkpoint_every=1000, log_every=1,
                    extra="[distributed]\ntimeout_s = 20\n" + extra)


def driver_command(cfg, placement, summary, workers="2"):
    python_path = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return ["env", f"PYTHONPATH={python_path}", *[f"{k}={v}" for k, v in RAY_AUTH.items()],
            sys.executable, "-m", "tessera.ray", "train", cfg,
            "--num-workers", workers, "--address", HEAD, "--placement", placement, "--tessera-bin", TESSERA,
            "--max-failures", "1", "--summary-json", summary]


def test_ddp_across_two_ray_hosts_equals_one_process(ray_hosts, tmp_path):
    code, out = run([TESSERA, "train", config(tmp_path, "one", 10)])
    assert code == 0, out
    summary = tmp_path / "spread.json"
    code, out = in_host("host1", *driver_command(config(tmp_path, "spread", 10), "STRICT_SPREAD", str(summary)),
                        timeout=240)
    assert code == 0, out
    result = json.loads(summary.read_text())
    assert result["attempts"] == 1 and sorted(result["nodes"]) == ["198.18.0.1", "198.18.0.2"], out
    assert_weights_close(checkpoint_weights(result["checkpoint"]),
                         checkpoint_weights(str(tmp_path / "one" / "checkpoints" / "step-00000010")), 1e-5)


def test_a_lost_host_ends_in_a_resumed_job_with_no_step_lost(ray_hosts, tmp_path):
    # One worker per host (STRICT_SPREAD), 1 to 2 of them; host2 is killed once rank 0 has logged step 20
    # of 400: the restarted job is a world of one on host1, once Ray has seen host2 go, resumed from the
    # survivor's step (a global batch of 64 trains alike at any world size).
    summary = tmp_path / "lost.json"
    slow = "debug_slow_rank = 0\ndebug_slow_ms = 25\n"  # 10 s of steps left when host2 goes
    proc = subprocess.Popen(["bash", os.path.join(REPO, "scripts", "cluster.sh"), "exec", "host1",
                             *driver_command(config(tmp_path, "lost", 400, slow), "STRICT_SPREAD", str(summary), "1:2")],
                            env={**os.environ, "TESSERA_CLUSTER": CLUSTER}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, killed = [], False
    # A driver that goes silent is ended at 300 s all the same: its output then ends too.
    watchdog = threading.Timer(300, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if not killed and "step 20 " in line:
                code, out = cluster("kill", "host2")
                assert code == 0, out
                killed = True
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines)
    assert killed, out[-4000:]
    assert proc.returncode == 0, out[-4000:]
    result = json.loads(summary.read_text())
    assert result["attempts"] == 2 and result["steps_lost"] == [0] and len(result["restart_seconds"]) == 1, result
    assert result["world_sizes"] == [2, 1] and result["nodes"] == ["198.18.0.1"], result
    assert result["checkpoint"].endswith("step-00000400"), result
