#!/usr/bin/python3
"""`tessera bench ray --parts tune`: `tessera tune` beside Ray Tune, both with ASHA, on the same search.

Run with the reference's interpreter (.venv/bin/python3: Ray and PyTorch from PyPI), PYTHONPATH=build/python
and TESSERA_BIN set (`tessera bench ray` does this):

    .venv/bin/python3 bench/ray_tune.py [--trials 16] [--epochs 9]

The search: the MLP 784-W-10 on Fashion-MNIST, SGD at batch 64, one thread per trial and 2 trials at a
time (this machine's 2 cores); lr log-uniform in [1e-3, 0.5], momentum uniform in [0, 0.95], width W one
of 32, 64, 128; `--trials` random trials (each side its own draws from the same distributions); ASHA with
eta 3, a bottom rung of 1 epoch and a top rung of `--epochs`, on the test accuracy after each epoch.
- tessera: `tessera tune` (its trials are `tessera train` processes of the C++ trainer);
- Ray: Ray Tune's ASHAScheduler over a function trainable that trains the same MLP with PyTorch (what a
  Ray user runs), reporting the test accuracy after each epoch.
Reported per side: the wall time of the whole search, the best accuracy found, the wall time until that
accuracy was first reached, and the epochs trained in all. The last line of stdout is one JSON object.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import fashion_mnist_numpy

BATCH, ETA = 64, 3


def torch_trial(config):
    """One Ray Tune trial: the MLP with PyTorch, the test accuracy reported after each epoch."""
    import torch
    from torch import nn
    from ray import tune
    sys.path.insert(0, config["bench_dir"])
    from fashion_mnist_numpy import split

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = (torch.from_numpy(a) for a in split(train=True, flat=True))
    tx, ty = (torch.from_numpy(a) for a in split(train=False, flat=True))
    model = nn.Sequential(nn.Linear(784, config["width"]), nn.ReLU(), nn.Linear(config["width"], 10))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(config["epochs"]):
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(y) - BATCH + 1, BATCH):
            index = order[start:start + BATCH]
            opt.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            opt.step()
        with torch.no_grad():
            accuracy = float((model(tx).argmax(1) == ty).float().mean())
        tune.report({"eval_accuracy": accuracy, "epoch": epoch + 1, "unix_time": time.time()})


def run_ray_tune(trials, epochs):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    space = {"lr": tune.loguniform(1e-3, 0.5), "momentum": tune.uniform(0.0, 0.95),
             "width": tune.choice([32, 64, 128]), "epochs": epochs,
             "bench_dir": os.path.dirname(os.path.abspath(__file__))}
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=epochs, grace_period=1, reduction_factor=ETA)
    storage = tempfile.mkdtemp(prefix="tessera-bench-ray-tune-")
    tuner = tune.Tuner(tune.with_resources(torch_trial, {"cpu": 1}), param_space=space,
                       tune_config=tune.TuneConfig(metric="eval_accuracy", mode="max", scheduler=scheduler,
                                                   num_samples=trials, max_concurrent_trials=2),
                       run_config=tune.RunConfig(storage_path=storage, name="bench", verbose=0))
    start = time.time()
    grid = tuner.fit()
    wall = time.time() - start
    best, best_at, epochs_trained = -1.0, None, 0
    for result in grid:
        history = result.metrics_dataframe
        if history is None or history.empty:
            continue
        epochs_trained += len(history)
        for _, row in history.iterrows():
            if row["eval_accuracy"] > best or (row["eval_accuracy"] == best and row["unix_time"] - start < best_at):
                best, best_at = row["eval_accuracy"], row["unix_time"] - start
    shutil.rmtree(storage, ignore_errors=True)
    return {"wall_s": wall, "best_accuracy": best, "seconds_to_best": best_at, "epochs_trained": epochs_trained}


def run_tessera_tune(trials, epochs, tessera_bin, out_dir):
    config = os.path.join(out_dir, "mlp.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"""[model]\nname = "mlp"\nhidden = [64]\n[data]\ndataset = "fashion-mnist"\ndir = "{fashion_mnist_numpy.DATA}"
[optimizer]\nname = "sgd"\nlr = 0.01\n[train]\nepochs = {epochs}\nbatch_size = {BATCH}\nseed = 0\nthreads = 1
log_every = 100000\noutput_dir = "{out_dir}/unused"\n""")
    space = os.path.join(out_dir, "space.toml")
    with open(space, "w", encoding="utf-8") as f:
        f.write("[optimizer.lr]\nlog_uniform = [1e-3, 0.5]\n[optimizer.momentum]\nuniform = [0.0, 0.95]\n"
                "[model.hidden]\nchoice = [[32], [64], [128]]\n")
    results = os.path.join(out_dir, "tune")
    journal = os.path.join(results, "tune.jsonl")
    # Each finished rung is a line of tune.jsonl: read as they come, to time the best one's arrival.
    arrivals, done = [], threading.Event()

    def follow():
        offset = 0
        while not done.wait(0.1):
            if os.path.exists(journal):
                with open(journal, encoding="utf-8") as f:
                    f.seek(offset)
                    data = f.read()
                end = data.rfind("\n") + 1
                offset += end
                now = time.time()
                arrivals.extend((now, json.loads(line)) for line in data[:end].splitlines() if line.strip())

    start = time.time()
    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    proc = subprocess.run([tessera_bin, "tune", config, "--space", space, "--trials", str(trials), "--parallel", "2",
                           "--scheduler", "asha", "--eta", str(ETA), "--min-epochs", "1", "--seed", "0", "--out",
                           results], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
    wall = time.time() - start
    done.set()
    follower.join()
    if proc.returncode != 0:
        raise RuntimeError(f"tessera tune failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    with open(journal, encoding="utf-8") as f:  # anything the follower had not read yet
        records = [json.loads(line) for line in f if line.strip()]
    for record in records[len(arrivals):]:
        arrivals.append((time.time(), record))
    best, best_at, epochs_trained = -1.0, None, 0
    trained = {}
    for at, record in arrivals:
        if record.get("status") != "ok" or "metric" not in record:
            continue
        # A promoted trial resumes: the epochs it trained are its highest rung's.
        trained[record["trial"]] = max(trained.get(record["trial"], 0), record["epochs"])
        if record["metric"] > best:
            best, best_at = record["metric"], at - start
    epochs_trained = sum(trained.values())
    return {"wall_s": wall, "best_accuracy": best, "seconds_to_best": best_at, "epochs_trained": epochs_trained}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=9, help="ASHA's top rung")
    args = ap.parse_args()
    import torch  # noqa: F401  (before tessera's CUDA libraries: see bench/ray_train.py)
    import ray
    tessera_bin = os.environ.get("TESSERA_BIN", "tessera")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024 * 1024)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-tune-") as out_dir:
        print("bench ray tune: tessera tune", file=sys.stderr, flush=True)
        ours = run_tessera_tune(args.trials, args.epochs, tessera_bin, out_dir)
        print("bench ray tune: Ray Tune (ASHA)", file=sys.stderr, flush=True)
        theirs = run_ray_tune(args.trials, args.epochs)
    print(f"\nbench ray tune: {args.trials} trials, ASHA eta {ETA}, rungs 1..{args.epochs} epochs, 2 at a time x 1 "
          f"thread; Ray {ray.__version__}, PyTorch {torch.__version__}")
    print(f"{'side':26} {'search s':>9} {'best acc':>9} {'s to best':>10} {'epochs':>7}")
    for name, r in (("tessera tune", ours), ("Ray Tune + PyTorch", theirs)):
        print(f"{name:26} {r['wall_s']:9.1f} {r['best_accuracy']:9.4f} {r['seconds_to_best']:10.1f} {r['epochs_trained']:7d}")
    print(f"{'ratio Ray/tessera':26} {theirs['wall_s'] / ours['wall_s']:8.2f}x {'':9} "
          f"{theirs['seconds_to_best'] / ours['seconds_to_best']:9.2f}x")
    print(json.dumps({"ray_version": ray.__version__, "torch_version": torch.__version__, "trials": args.trials,
                      "epochs": args.epochs, "tessera": ours, "ray_tune": theirs}))
    ray.shutdown()


if __name__ == "__main__":
    main()
