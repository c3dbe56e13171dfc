"""A parameter-server job from Python: the launcher makes S processes servers and W workers; each
runs this script. Servers hold the parameters and run the optimizer; workers push gradients and
pull values (sync: every worker's step t is applied before anyone's t+1; async: no waiting).

    tessera run --servers 1 --workers 2 -- python3 examples/python/train_ps.py
"""
import argparse
import os

import tessera
import tessera.distributed.ps as ps
from tessera import nn
from tessera.data import DataLoader, DistributedSampler, FashionMNIST


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="async", choices=["sync", "async", "ssp"])
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: one epoch)")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    if ps.is_server():
        report = ps.run_server(optimizer="sgd", momentum=0.9, mode=args.mode)
        print(f"server {report['server']}: {report['updates']} updates, workers finished {sorted(report['finished_workers'])}",
              flush=True)
        return

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # set by tessera run
    tessera.manual_seed(0)  # every worker builds the same model; worker 0's initialises the servers
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    worker = ps.Worker(model)
    worker.start()
    train_set = FashionMNIST(train=True)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, seed=1)
    step = 0
    for x, y in DataLoader(train_set, batch_size=64, sampler=sampler):
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        worker.step(lr=args.lr)
        step += 1
        if args.max_steps and step >= args.max_steps:
            break
    worker.refresh()  # the newest values before evaluating
    model.eval()
    correct, test_set = 0, FashionMNIST(train=False)
    with tessera.no_grad():
        for x, y in DataLoader(test_set, batch_size=1000):
            correct += int(model(x).argmax(dim=1).eq(y).sum().item())
    worker.finish()
    print(f"worker {rank} done: {step} steps, test accuracy {correct / len(test_set):.4f}, "
          f"{worker.bytes_communicated / 1e6:.1f} MB moved", flush=True)


if __name__ == "__main__":
    main()
