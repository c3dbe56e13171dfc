"""`tessera tune ... --backend ray`: the search's trials as Ray Tune trials.

`tessera tune` draws the trials (the same values as its local backend with the same --seed), checks
them, and writes OUT/ray-search.json; this runs them with Ray Tune: each Ray trial is one of those trials,
a `tessera train` process (with --nproc, itself a DDP job) whose epoch records are reported to Ray Tune
as they come, and Ray's ASHA (rungs of min_epochs·eta^k epochs, async) stops the bad ones early by ending
their process. Ray Tune's results stay in OUT/ray (its experiment directory); OUT/ray-results.jsonl
holds one line per trial (its values, the epochs it trained, its last and best metric, ok or failed) and
the best trial is printed as the local backend prints it. A restarted search starts afresh."""
import json
import os
import signal
import subprocess
import sys
import time

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from ._actor import _MetricsTail, _die_with

POLL_S = 0.2  # how often a trial looks for new epoch records in its metrics.jsonl


def trial_dir(search, index):
    return os.path.join(search["out"], f"trial-{index:04d}")


def run_trial(config):
    """A Ray Tune function trainable: one trial of the search, to its end or until ASHA stops it."""
    search, index, tessera_bin = config["search"], config["trial"], config["tessera_bin"]
    directory = trial_dir(search, index)
    os.makedirs(directory, exist_ok=True)
    command = [tessera_bin, "train", search["config"]]
    for s in search["overrides"] + search["trials"][index]:
        command += ["--set", s]
    command += ["--set", f'train.output_dir="{directory}"', "--set", f"train.epochs={search['max_epochs']}",
                "--overwrite"]
    if search["nproc"] > 1:
        command += ["--nproc", str(search["nproc"])]
    # The records this run appends (a trial's directory may hold an earlier run's, moved aside by
    # --overwrite: a new file is read from its start).
    tail = _MetricsTail(os.path.join(directory, "metrics.jsonl"), from_start=False)
    log = open(os.path.join(directory, "log.txt"), "ab")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=_die_with(os.getpid()))
    deadline = time.monotonic() + search["trial_timeout_s"]
    try:
        while True:
            finished = proc.poll() is not None  # read once more after the end: its last records
            for record in (r for r in tail.read() if r.get("type") == "epoch"):
                value = record.get(search["metric"])
                if not isinstance(value, (int, float)):
                    raise RuntimeError(f"trial {index}: its epoch records have no number '{search['metric']}'")
                tune.report({search["metric"]: value, "epoch": record["epoch"] + 1, "step": record["step"]})
            if finished:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"trial {index} ran past --trial-timeout ({search['trial_timeout_s']:g} s)")
            time.sleep(POLL_S)
        if proc.returncode != 0:
            raise RuntimeError(f"trial {index}: tessera train exited with status {proc.returncode} (see {directory}/log.txt)")
    finally:
        if proc.poll() is None:  # stopped by ASHA, or failed: its process ends with it
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def run_search(search_path, address, tessera_bin):
    with open(search_path, encoding="utf-8") as f:
        search = json.load(f)
    python_path = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not ray.is_initialized():
        # The trainable's module: importable wherever the driver's tessera package is.
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": python_path}})
    metric, mode = search["metric"], search["mode"]
    if search["scheduler"] == "asha":
        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=search["max_epochs"],
                                  grace_period=search["min_epochs"], reduction_factor=search["eta"])
    else:
        scheduler = FIFOScheduler()
    trainable = tune.with_resources(run_trial, {"cpu": search["nproc"]})
    space = {"trial": tune.grid_search(list(range(len(search["trials"])))), "search": search,
             "tessera_bin": tessera_bin}
    tuner = tune.Tuner(trainable, param_space=space,
                       # A fresh actor per trial: a stopped trial's actor then ends, and its tessera train
                       # process with it (a reused actor could leave the stopped one running).
                       tune_config=tune.TuneConfig(metric=metric, mode=mode, scheduler=scheduler,
                                                   max_concurrent_trials=search["parallel"], reuse_actors=False),
                       run_config=tune.RunConfig(storage_path=search["out"], name="ray", verbose=0))
    grid = tuner.fit()
    lines = []
    for result in grid:
        index = result.config["trial"]
        history = result.metrics_dataframe
        values = [] if history is None or history.empty else list(history[metric])
        line = {"trial": index, "params": dict(s.split("=", 1) for s in search["trials"][index]),
                "epochs": len(values), "status": "failed" if result.error else "ok"}
        if values:
            line["metric"] = values[-1]
            line["best_metric"] = max(values) if mode == "max" else min(values)
        if result.error:
            text = str(result.error).strip()
            line["error"] = (text.splitlines()[-1] if text else type(result.error).__name__)[:500]
        lines.append(line)
    lines.sort(key=lambda line: line["trial"])
    # As the local backend's: the best of the trials that reached the most epochs (ASHA's highest rung),
    # never a failed one.
    ok = [line for line in lines if line["status"] == "ok" and "metric" in line]
    top = [line for line in ok if line["epochs"] == max((line["epochs"] for line in ok), default=0)]
    best = (max if mode == "max" else min)(top, key=lambda line: line["metric"]) if top else None
    partial = os.path.join(search["out"], "ray-results.jsonl.tmp")
    with open(partial, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    os.replace(partial, os.path.join(search["out"], "ray-results.jsonl"))
    for line in lines:
        shown = f"{metric} {line['metric']:.4f}" if "metric" in line else f"FAILED ({line.get('error', '')})"
        print(f"tune: trial {line['trial']}: {line['epochs']} epochs, {shown}")
    if best is None:
        print(f"tune: every trial failed; their logs are in {search['out']}/trial-*/log.txt")
        return 1
    values = " ".join(search["trials"][best["trial"]])
    print(f"tune: best trial {best['trial']} ({metric} {best['metric']:.4f} after {best['epochs']} epochs): {values}; "
          f"Ray Tune's results in {os.path.join(search['out'], 'ray')}, one line per trial in "
          f"{os.path.join(search['out'], 'ray-results.jsonl')}")
    sys.stdout.flush()
    return 0
