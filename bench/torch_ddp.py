#!/usr/bin/python3
"""PyTorch reference for `tessera bench ddp`: DistributedDataParallel (gloo) training steps per second.

Run with the reference's interpreter, .venv/bin/python3 (PyTorch 2 from PyPI: scripts/setup.sh --bench), or
/usr/bin/python3 (Debian's python3-torch 1.13, the older tables of docs/benchmarks.md):

    .venv/bin/python3 bench/torch_ddp.py --model {mlp,cnn} [--nproc 2] [--batch 64] [--steps N] [--warmup W] [--compile]

--compile wraps the DDP model in torch.compile (TorchInductor; its DDPOptimizer cuts the graph at the
buckets so that the all-reduces still overlap backward); compilation happens in the untimed warm-up.

N processes on this machine, each with one thread (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 and
torch.set_num_threads(1), set before torch is imported: the configuration BENCHMARKING.md names for one
core per process), DDP with its defaults (25 MiB buckets, gradients averaged by gloo all-reduce overlapped
with backward), SGD with momentum, per-process batch --batch of random data. Reports the global samples/s
of the slowest rank's timed loop. The last line of stdout is one JSON object; progress goes to stderr.
"""
import argparse
import json
import os
import socket
import sys
import time

os.environ.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})

from torch_train_step import build_model  # noqa: E402  (same models as bench train-step)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, port, queue):
    import torch
    import torch.distributed as dist
    from torch import nn
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(build_model(torch, nn, args.model))
    if args.compile:
        model = torch.compile(model)
    shape = (args.batch, 784) if args.model == "mlp" else (args.batch, 1, 28, 28)
    x, y = torch.randn(shape), torch.randint(0, 10, (args.batch,), dtype=torch.int64)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put({"samples_per_s": args.batch * args.nproc * args.steps / seconds.item(),
                   "torch_version": torch.__version__})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="per process")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="the DDP model under torch.compile")
    ap.add_argument("--attempt-timeout", type=float,
                    help="seconds before a run that has not finished is taken as hung and tried again "
                         "(default 120; 360 with --compile, whose warm-up compiles on each rank)")
    args = ap.parse_args()
    if args.attempt_timeout is None:
        args.attempt_timeout = 360 if args.compile else 120
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        sys.exit(f"torch_ddp: PyTorch is not available under {sys.executable} ({e}); scripts/setup.sh --bench")
    ctx = mp.get_context("spawn")
    # Debian's torch 1.13 at times deadlocks here (both workers waiting on a lock, after gloo has
    # connected: 1 run in 5 to 8 on 2026-11-26), or a worker dies and its peer waits in
    # init_process_group for 30 minutes. So every worker is watched, a failure or --attempt-timeout
    # ends the attempt, and the run is tried again with a fresh port.
    for attempt in range(1, 4):
        result = attempt_run(ctx, args, args.attempt_timeout)
        if result is not None:
            result.update({"model": args.model, "nproc": args.nproc, "batch_per_process": args.batch,
                           "mode": "compiled" if args.compile else "eager"})
            print(json.dumps(result))
            return
        print(f"torch_ddp: attempt {attempt} failed, trying again", file=sys.stderr)
    sys.exit("torch_ddp: 3 attempts failed")


def attempt_run(ctx, args, timeout_s):
    from multiprocessing.connection import wait
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, args, port, queue)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    running = list(procs)
    while running:
        left = deadline - time.monotonic()
        ended = wait([p.sentinel for p in running], timeout=max(left, 0))
        failed = [p for p in procs if p.exitcode not in (None, 0)]
        if failed or left <= 0:
            for p in procs:
                p.kill()
                p.join()
            why = f"exit {failed[0].exitcode}" if failed else f"no result in {timeout_s} s"
            print(f"torch_ddp: a worker failed ({why})", file=sys.stderr)
            return None
        running = [p for p in running if p.sentinel not in ended]
    return queue.get()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
