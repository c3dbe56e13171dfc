"""The Gloo reference for `tessera bench comm`: torch.distributed all_reduce with backend "gloo"
(Debian's python3-torch 1.13) at the same sizes and with the same method (check, warm-up, barrier,
timed calls, slowest rank's mean), printing the same JSON lines.

    /usr/bin/python3 bench/reference/torch_gloo_allreduce.py --nproc 2 [--min-bytes B --max-bytes B]

Spawns its own ranks and meets through a FileStore in a temporary directory, so it needs no port.
"""
import argparse
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, init_file, min_bytes, max_bytes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    nbytes = min_bytes
    while nbytes <= max_bytes:
        count = nbytes // 4 // world * world
        i = torch.arange(count, dtype=torch.float32)
        data = (rank + 1) + torch.remainder(i, 7)
        dist.all_reduce(data)
        want = sum((r + 1) + torch.remainder(i, 7) for r in range(world))
        wrong = int((data != want).sum())
        iters = int(min(max(64.0 * (1 << 20) / nbytes, 5.0), 200.0))
        for _ in range(2):
            dist.all_reduce(data)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        mean = (time.perf_counter() - start) / iters
        stats = torch.tensor([mean], dtype=torch.float64)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        errors = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(errors)
        if rank == 0:
            size = count * 4
            algbw = size / stats.item() / 1e9
            busbw = algbw * 2 * (world - 1) / world if world > 1 else algbw
            print(json.dumps({"impl": "torch-gloo", "op": "allreduce", "ranks": world, "bytes": size,
                              "time_us": round(stats.item() * 1e6, 2), "algbw": round(algbw, 4),
                              "busbw": round(busbw, 4), "wrong": int(errors.item())}), flush=True)
        nbytes *= 2
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(run, args=(a.nproc, os.path.join(d, "store"), a.min_bytes, a.max_bytes), nprocs=a.nproc)


if __name__ == "__main__":
    main()
