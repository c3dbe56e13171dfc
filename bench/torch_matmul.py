#!/usr/bin/env python3
"""PyTorch reference for `tessera bench matmul --device cuda`: TFLOP/s of torch.matmul on the GPU.

    python3 bench/torch_matmul.py --sizes 2048,4096,8192 --precisions fp32,tf32,bf16 [--repeats 5] [--device cuda:0]

fp32 turns TF32 off (torch.backends.cuda.matmul.allow_tf32 = False), tf32 turns it on, bf16 multiplies
bfloat16 tensors (PyTorch's output is bfloat16; tessera's is float32, 2 more bytes per output element,
under 0.1% of the traffic at these sizes). Each cell: 3 warm-up products, then the best of --repeats
batches of --iters products timed with CUDA events. Only the last line of stdout is output: one JSON
object with the version of PyTorch, its CUDA and the device.
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--precisions", default="fp32,tf32,bf16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch.cuda.is_available() is False", "torch_version": torch.__version__}))
        return 1
    device = torch.device(args.device)
    results = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for precision in args.precisions.split(","):
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            for _ in range(3):
                torch.matmul(a, b)
            torch.cuda.synchronize(device)
            best = float("inf")
            for _ in range(args.repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.iters):
                    torch.matmul(a, b)
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3 / args.iters)
            results.append({"n": n, "precision": precision, "tflops": 2.0 * n * n * n / best / 1e12})
            print(f"torch {precision} {n}: {results[-1]['tflops']:.1f} TFLOP/s", file=sys.stderr)
    print(json.dumps({"torch_version": torch.__version__, "torch_cuda": torch.version.cuda,
                      "device": torch.cuda.get_device_name(device), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
