#!/usr/bin/python3
"""`tessera bench ray`: tessera DDP under tessera.ray beside Ray Train's TorchTrainer (PyTorch 2 DDP over
gloo), the same job on the same Ray cluster in the same run.

Run with the reference's interpreter (.venv/bin/python3: PyTorch 2 and Ray from PyPI, scripts/setup.sh
--bench), PYTHONPATH=build/python and TESSERA_BIN set (`tessera bench ray` does this):

    .venv/bin/python3 bench/ray_train.py [--models mlp,cnn] [--workers 2] [--epochs 1] [--repeats 1]

Method: one local Ray cluster (num_cpus = 2 x workers logical CPUs on this machine); per model and repeat,
tessera and Ray Train alternate. Each side: `--workers` workers of one CPU (resources_per_worker CPU=1:
one intra-op thread each, as Ray Train sets OMP_NUM_THREADS), the model of `tessera bench train-step`,
SGD(lr 0.05, momentum 0.9), a per-worker batch of 64 over Fashion-MNIST (each rank every workers-th sample
of one shuffled order), `--epochs` epochs, then the test accuracy of the final weights.
- samples/s: global samples of the steps after the first 10 over the time they took (rank 0's clock);
- submit to first step: from the trainer's fit() call to the end of the first step (unix clocks of one
  machine);
- accuracy: the whole test set (10,000 images) after the last step.
The last line of stdout is one JSON object; progress goes to stderr.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import fashion_mnist_numpy

BATCH, LR, MOMENTUM, WARM_STEPS = 64, 0.05, 0.9, 10


def torch_loop(config):
    """Ray Train's worker: PyTorch DDP through ray.train.torch.prepare_model."""
    import torch
    from torch import nn
    import ray.train
    import ray.train.torch
    sys.path.insert(0, config["bench_dir"])
    from fashion_mnist_numpy import split
    from torch_train_step import build_model

    torch.manual_seed(0)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    images, labels = (torch.from_numpy(a) for a in split(train=True, flat=config["model"] == "mlp"))
    model = ray.train.torch.prepare_model(build_model(torch, nn, config["model"]))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    first_step_unix, warm_t, warm_samples, steps = None, None, 0, 0
    for epoch in range(config["epochs"]):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        mine = order[rank::world]
        for start in range(0, len(mine) - BATCH + 1, BATCH):
            index = mine[start:start + BATCH]
            opt.zero_grad()
            loss_fn(model(images[index]), labels[index]).backward()
            opt.step()
            steps += 1
            if first_step_unix is None:
                first_step_unix = time.time()
            if steps == WARM_STEPS:
                warm_t = time.perf_counter()
            elif steps > WARM_STEPS:
                warm_samples += BATCH * world
    seconds = time.perf_counter() - warm_t
    accuracy = None
    if rank == 0:
        test_x, test_y = (torch.from_numpy(a) for a in split(train=False, flat=config["model"] == "mlp"))
        with torch.no_grad():
            accuracy = float((model(test_x).argmax(1) == test_y).float().mean())
    if rank == 0:
        # Rank 0's figures through a file of this machine: Ray Train 2.x keeps reported metrics with
        # checkpoints only (Train V2), and this job writes none.
        with open(config["result_file"], "w", encoding="utf-8") as f:
            json.dump({"samples_per_s": warm_samples / seconds, "first_step_unix": first_step_unix,
                       "accuracy": accuracy, "steps": steps, "torch_version": torch.__version__}, f)


def run_ray_train(model, workers, epochs, bench_dir):
    from ray.train import ScalingConfig, RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    storage = tempfile.mkdtemp(prefix="tessera-bench-ray-train-")
    result_file = os.path.join(storage, "rank0.json")
    trainer = TorchTrainer(torch_loop, train_loop_config={"model": model, "epochs": epochs, "bench_dir": bench_dir,
                                                          "result_file": result_file},
                           scaling_config=ScalingConfig(num_workers=workers, use_gpu=False,
                                                        resources_per_worker={"CPU": 1}),
                           torch_config=TorchConfig(backend="gloo"),
                           run_config=RunConfig(storage_path=storage, name="bench"))
    submitted = time.time()
    trainer.fit()
    with open(result_file, encoding="utf-8") as f:
        m = json.load(f)
    shutil.rmtree(storage, ignore_errors=True)
    return {"samples_per_s": m["samples_per_s"], "submit_to_first_step_s": m["first_step_unix"] - submitted,
            "accuracy": m["accuracy"], "steps": m["steps"], "torch_version": m["torch_version"]}


def run_tessera(model, workers, epochs, out_dir):
    from tessera.ray import TesseraTrainer
    hidden = "hidden = [512, 256]\n" if model == "mlp" else ""
    config = os.path.join(out_dir, f"{model}.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"""[model]\nname = "{model}"\n{hidden}
[data]\ndataset = "fashion-mnist"\ndir = "{fashion_mnist_numpy.DATA}"
[optimizer]\nname = "sgd"\nlr = {LR}\nmomentum = {MOMENTUM}
[train]\nepochs = {epochs}\nbatch_size = {BATCH}\nseed = 0\nthreads = 1\nlog_every = 100000
output_dir = "{os.path.join(out_dir, model)}"\noverwrite = true\n""")
    submitted = time.time()
    result = TesseraTrainer(config=config, num_workers=workers, resources_per_worker={"CPU": 1}, verbose=False).fit()
    steps = [r for r in result.metrics_history if r.get("type") == "step"]
    epochs_done = [r for r in result.metrics_history if r.get("type") == "epoch"]
    warm, last = steps[WARM_STEPS - 1], steps[-1]
    samples = BATCH * workers * (last["step"] - warm["step"])
    return {"samples_per_s": samples / (last["unix_time"] - warm["unix_time"]),
            "submit_to_first_step_s": steps[0]["unix_time"] - submitted,
            "accuracy": epochs_done[-1].get("eval_accuracy") if epochs_done else None, "steps": last["step"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    # PyTorch first: its libtorch_cuda needs the NCCL of its nvidia-nccl wheel, and tessera's module
    # (built with CUDA) would otherwise have loaded the toolkit's older libnccl.so.2 in this process.
    import torch  # noqa: F401
    import ray
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    ray.init(num_cpus=2 * args.workers, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024)
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-ray-") as out_dir:
        for model in args.models.split(","):
            runs = {"tessera": [], "ray_train": []}
            for repeat in range(args.repeats):
                print(f"bench ray: {model}, repeat {repeat + 1}: tessera.ray", file=sys.stderr, flush=True)
                runs["tessera"].append(run_tessera(model, args.workers, args.epochs, out_dir))
                print(f"bench ray: {model}, repeat {repeat + 1}: Ray Train TorchTrainer", file=sys.stderr, flush=True)
                runs["ray_train"].append(run_ray_train(model, args.workers, args.epochs, bench_dir))
            row = {"model": model}
            for side, results in runs.items():
                row[side] = {key: statistics.median(r[key] for r in results)
                             for key in ("samples_per_s", "submit_to_first_step_s")}
                row[side]["range"] = {key: [min(r[key] for r in results), max(r[key] for r in results)]
                                      for key in ("samples_per_s", "submit_to_first_step_s")}
                row[side]["accuracy"] = results[-1]["accuracy"]
                row[side]["steps"] = results[-1]["steps"]
            row["torch_version"] = runs["ray_train"][-1]["torch_version"]
            rows.append(row)
    print(f"\nbench ray: {args.workers} workers x 1 CPU, batch {BATCH} per worker, {args.epochs} epoch(s) of "
          f"Fashion-MNIST; Ray {ray.__version__}, PyTorch {rows[0]['torch_version']}")
    print(f"(median [min-max] of {args.repeats}; ratios of the medians)")
    print(f"{'model':6} {'side':22} {'samples/s':>22} {'submit->step 1 s':>20} {'accuracy':>9}")
    for row in rows:
        for side, name in (("tessera", "tessera.ray (DDP)"), ("ray_train", "Ray Train TorchTrainer")):
            r = row[side]
            accuracy = "-" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
            rate = f"{r['samples_per_s']:.0f} [{r['range']['samples_per_s'][0]:.0f}-{r['range']['samples_per_s'][1]:.0f}]"
            first = (f"{r['submit_to_first_step_s']:.2f} [{r['range']['submit_to_first_step_s'][0]:.2f}-"
                     f"{r['range']['submit_to_first_step_s'][1]:.2f}]")
            print(f"{row['model']:6} {name:22} {rate:>22} {first:>20} {accuracy:>9}")
        print(f"{row['model']:6} {'ratio tessera/Ray':22} {row['tessera']['samples_per_s'] / row['ray_train']['samples_per_s']:21.2f}x "
              f"{row['ray_train']['submit_to_first_step_s'] / row['tessera']['submit_to_first_step_s']:19.2f}x")
    print(json.dumps({"ray_version": ray.__version__, "workers": args.workers, "epochs": args.epochs, "rows": rows}))
    ray.shutdown()


if __name__ == "__main__":
    main()
