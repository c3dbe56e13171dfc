"""Fashion-MNIST with an MLP under DistributedDataParallel: each rank trains on its shard of every
batch, and backward returns with the gradients averaged over the ranks.

    tessera run --nproc-per-node 2 -- python3 examples/python/train_ddp.py
    (alone it runs as a job of one; under mpirun or srun it joins the job they started)
"""
import argparse

import tessera
import tessera.distributed as dist
from tessera import nn, optim
from tessera.data import DataLoader, DistributedSampler, FashionMNIST


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0, help="the model's initialisation and the shuffle")
    parser.add_argument("--save", default="", help="rank 0 writes the trained model here (safetensors)")
    parser.add_argument("--no-eval", action="store_true")
    args = parser.parse_args()

    group = dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    tessera.manual_seed(args.seed)
    train_set = FashionMNIST(train=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = dist.DistributedDataParallel(model)
    opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        print(f"{world} rank(s) over {group.backend}, {len(loader)} batches of {args.batch_size} per rank", flush=True)

    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()  # gradients averaged over the ranks while backward runs
            opt.step()
            step += 1
            if rank == 0 and step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break

    if rank == 0:
        if args.save:
            tessera.save(model, args.save)
        if not args.no_eval:
            model.eval()
            correct, test_set = 0, FashionMNIST(train=False)
            with tessera.no_grad():
                for x, y in DataLoader(test_set, batch_size=1000):
                    correct += int(model(x).argmax(dim=1).eq(y).sum().item())
            print(f"test accuracy {correct / len(test_set):.4f} after {step} steps", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
