"""Fashion-MNIST with ZeRO (FSDP) from Python: each rank keeps only its piece of the parameters,
gradients and Adam's state (stage 3), gathering a layer just before it runs.

    tessera run --nproc-per-node 2 -- python3 examples/python/train_zero.py --stage 3
"""
import argparse

import tessera
import tessera.distributed as dist
from tessera import nn, optim
from tessera.data import DataLoader, DistributedSampler, FashionMNIST


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", type=int, default=3, choices=[1, 2, 3])
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--save", default="", help="rank 0 writes the whole trained model here")
    args = parser.parse_args()

    dist.init_process_group()
    rank = dist.get_rank()
    tessera.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    zero = dist.ZeroDataParallel(model, stage=args.stage)
    opt = optim.Adam(zero.parameters(), lr=1e-3)  # over this rank's pieces only
    zero.attach(opt)
    train_set = FashionMNIST(train=True)
    sampler = DistributedSampler(train_set, shuffle=True, seed=1)
    step = 0
    for x, y in DataLoader(train_set, batch_size=args.batch_size, sampler=sampler):
        loss = nn.functional.cross_entropy(zero(x), y)
        loss.backward()
        zero.step(opt)  # update the pieces, gather what the stage keeps whole, zero the gradients
        step += 1
        if args.max_steps and step >= args.max_steps:
            break
    state = zero.full_state_dict()  # collective: every rank gets the whole model
    memory = zero.memory(opt)
    if rank == 0:
        if args.save:
            tessera.save(state, args.save)
        print(f"stage {args.stage}: {step} steps; this rank holds {memory['total'] / 1e6:.2f} MB of training state",
              flush=True)


if __name__ == "__main__":
    main()
