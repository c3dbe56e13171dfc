#!/usr/bin/python3
"""tessera from Python, for `tessera bench train-step`: the same train step as its C++ column (the
MLP 784-512-256-10 or the CNN, batch 128, SGD with momentum 0.9, 5 warm-up steps), written as a
user would write it in Python, so that the difference is what the bindings cost.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_train_step.py --model mlp --threads 1

The last line of stdout is one JSON object."""
import argparse
import json
import statistics
import time

import tessera
from tessera import nn, optim

BATCH = 128


def build(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn"], required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    precision = tessera.bfloat16 if args.precision == "bf16" else tessera.float32

    tessera.set_num_threads(args.threads)
    tessera.manual_seed(0)
    model = build(args.model)
    x = tessera.randn(BATCH, 784) if args.model == "mlp" else tessera.randn(BATCH, 1, 28, 28)
    y = tessera.randint(0, 10, [BATCH])
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        with tessera.autocast(precision):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
        opt.step()

    for _ in range(5):
        step()
    rates = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(BATCH * args.steps / (time.perf_counter() - t0))
    print(json.dumps({"model": args.model, "threads": args.threads, "samples_per_s_median": statistics.median(rates),
                      "samples_per_s_min": min(rates), "samples_per_s_max": max(rates)}))


if __name__ == "__main__":
    main()
