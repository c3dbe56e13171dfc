"""Fashion-MNIST with an MLP in one process: the PyTorch habits, tessera's engine.

    PYTHONPATH=build/python python3 examples/python/train_mlp.py --epochs 1
"""
import argparse

import tessera
from tessera import nn, optim
from tessera.data import DataLoader, FashionMNIST


def evaluate(model, dataset):
    model.eval()
    correct = 0
    with tessera.no_grad():
        for x, y in DataLoader(dataset, batch_size=1000):
            correct += int(model(x).argmax(dim=1).eq(y).sum().item())
    model.train()
    return correct / len(dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    tessera.manual_seed(0)
    train_set, test_set = FashionMNIST(train=True), FashionMNIST(train=False)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=1)

    step = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
    print(f"test accuracy {evaluate(model, test_set):.4f} after {step} steps", flush=True)


if __name__ == "__main__":
    main()
