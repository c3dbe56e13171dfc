"""A model written in Python: an nn.Module subclass whose layers and parameters register by
assignment, trained on Fashion-MNIST, saved and loaded back with tessera.save / tessera.load.

    PYTHONPATH=build/python python3 examples/python/custom_module.py --max-steps 200 --out runs/custom.safetensors
"""
import argparse
import os

import tessera
from tessera import nn, optim
from tessera.data import DataLoader, FashionMNIST


class ResidualBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.fc2(nn.functional.relu(self.fc1(x))))


class Net(nn.Module):
    def __init__(self, width=128, blocks=2, classes=10):
        super().__init__()
        self.stem = nn.Linear(784, width)
        self.blocks = nn.ModuleList([ResidualBlock(width) for _ in range(blocks)])
        self.head = nn.Linear(width, classes)
        # A parameter of its own: a learned temperature on the logits.
        self.log_temperature = nn.Parameter(tessera.zeros(1))

    def forward(self, x):
        h = nn.functional.relu(self.stem(x.flatten(1)))
        for block in self.blocks:
            h = block(h)
        return self.head(h) * self.log_temperature.exp()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=500)
    parser.add_argument("--out", default="runs/python/custom_module.safetensors")
    args = parser.parse_args()

    tessera.manual_seed(0)
    model = Net()
    print("parameters:", ", ".join(name for name, _ in model.named_parameters()))
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(FashionMNIST(train=True), batch_size=128, shuffle=True, seed=1)
    for step, (x, y) in enumerate(loader, start=1):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step >= args.max_steps:
            break

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tessera.save(model, args.out)
    restored = Net()
    restored.load_state_dict(tessera.load(args.out))
    test = FashionMNIST(train=False)
    model.eval()
    restored.eval()
    correct = same = 0
    with tessera.no_grad():
        for x, y in DataLoader(test, batch_size=1000):
            a, b = model(x), restored(x)
            correct += int(a.argmax(dim=1).eq(y).sum().item())
            same += int(((a - b) ** 2).sum().item() == 0.0)
    print(f"test accuracy {correct / len(test):.4f}; restored model identical on {same} of {len(test) // 1000} batches")


if __name__ == "__main__":
    main()
