"""The reference of `tessera bench live`: PyTorch's answer to a lost worker, torchrun's elastic agent.
One worker of a DDP job (gloo) SIGKILLs itself at a given step in the first attempt; torchrun stops
the others and restarts every worker (--max-restarts 1), which resume from the newest checkpoint the
job wrote (torch.save every `--checkpoint-every` steps, as the PyTorch elastic tutorial does).

The MLP 784-512-256-10 on Fashion-MNIST (bench/fashion_mnist_numpy.py), SGD(lr 0.05, momentum 0.9),
a global batch split over the workers, the same as tessera's side. Rank 0 appends one JSON line per
completed step to `--step-log` ({"step", "t" (Unix seconds), "attempt"}); the worker that kills itself
writes {"killed_at": step, "t"} first. Started by torchrun; run with --help for the options."""
import argparse
import json
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from fashion_mnist_numpy import split


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch", type=int, default=120)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--kill-rank", type=int, default=2)
    p.add_argument("--kill-step", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--step-log", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # The agent's store under a prefix of this attempt's own: PyTorch 2.15's gloo, restarted by
    # torchrun, otherwise read the previous attempt's addresses and failed to connect
    # ("connectFullMesh failed ... Connection refused"; seen every time here).
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", store), rank=rank, world_size=world)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    images, labels = split(train=True, flat=True)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    checkpoint = os.path.join(a.ckpt_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    per_rank = a.global_batch // world
    generator = torch.Generator().manual_seed(1)
    order = torch.randperm(x.shape[0], generator=generator)
    loss_fn = nn.CrossEntropyLoss()
    log = open(a.step_log, "a") if rank == 0 else None
    while step < a.steps:
        start = step * a.global_batch + rank * per_rank
        idx = order[start:start + per_rank]
        opt.zero_grad()
        loss_fn(ddp(x[idx]), y[idx]).backward()
        opt.step()
        step += 1
        if log:
            log.write(json.dumps({"step": step, "t": time.time(), "attempt": attempt}) + "\n")
            log.flush()
        if rank == 0 and step % a.checkpoint_every == 0:
            tmp = checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, checkpoint)
        if attempt == 0 and rank == a.kill_rank and step == a.kill_step:
            with open(a.step_log + ".kill", "w") as f:
                f.write(json.dumps({"killed_at": step, "t": time.time()}) + "\n")
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"torch_version": torch.__version__, "steps": step}))


if __name__ == "__main__":
    main()
