"""A parameter-server job from Python: the trainer of `tessera train` with distributed.strategy = "ps".
The launcher makes S processes servers and W workers; tessera.train.run gives each its part.

    tessera run --servers 1 --workers 2 -- python3 examples/python/train_ps.py
"""
import argparse

import tessera

CONFIG = {
    "model": {"name": "mlp", "hidden": [256]},
    "data": {"dataset": "fashion-mnist", "dir": "/usr/share/datasets/fashion-mnist"},
    "optimizer": {"name": "adam", "lr": 0.001},
    "train": {"epochs": 1, "batch_size": 64, "seed": 0, "output_dir": "runs/python/ps"},
    "distributed": {"strategy": "ps", "servers": 1, "ps_mode": "async"},
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", action="append", default=[], help="section.key=value, as tessera train --set")
    args = parser.parse_args()
    result = tessera.train.run(CONFIG, overrides=args.set)
    if not result["server"]:
        # The trainer evaluates at the end of each epoch; a run cut short by train.max_steps has none.
        accuracy = result.get("accuracy")
        tail = f", test accuracy {accuracy:.4f}" if accuracy is not None else ""
        print(f"worker done: {result['steps']} steps{tail}; checkpoint {result['checkpoint']}", flush=True)


if __name__ == "__main__":
    main()
