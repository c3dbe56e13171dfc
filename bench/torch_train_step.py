#!/usr/bin/python3
"""PyTorch reference for `tessera bench train-step`: training steps per second of a small MLP, CNN or GPT.

Run with the reference's interpreter: .venv/bin/python3 (PyTorch 2 from PyPI, scripts/setup.sh --bench), or
/usr/bin/python3 for Debian's python3-torch 1.13 (the older tables of docs/benchmarks.md):

    .venv/bin/python3 bench/torch_train_step.py --model {mlp,cnn,gpt} --threads {1,2} [--steps N] [--warmup W]
                                                [--repeats R] [--batch 128] [--precision {fp32,bf16,fp16}] [--compile]
                                                [--device {cpu,cuda,cuda:N}]

--compile runs the model under torch.compile (TorchInductor, its default mode: C++/OpenMP kernels
generated for this CPU); the warm-up steps include the compilation, which is not timed.

The GPT is tessera's CharTransformer at d 256, 4 layers, 4 heads, context 128 (pre-LayerNorm blocks,
GELU MLP of 4d, causal attention written as two matmuls and a masked softmax, as tessera computes it),
16 sequences a step, its figures in tokens/s. bf16 (fp16) runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16 (float16)), PyTorch's CPU mixed precision.

Why several configurations (see /work/shared/BENCHMARKING.md): this PyTorch sends its matrix products to the
system OpenBLAS, which ignores torch.set_num_threads and starts its own thread pool. With
set_num_threads(2) and the default environment, the OpenMP and OpenBLAS pools fight over the two cores and
the MLP runs 2.7-3.7x slower than it should. A fair comparison is against PyTorch's *best* configuration, so
for each thread count this script times every candidate below, each in a fresh subprocess (the variables
must be set before torch is imported, as OpenBLAS and OpenMP read them at load), and reports the fastest.

--device cuda runs on the GPU: model and batch there, torch.autocast("cuda") for bf16/fp16, TF32 off (as
tessera's float32 products), each timed repeat ended by torch.cuda.synchronize(); the thread configurations
do not apply there and one is run.

Only the final line of stdout is output: one JSON object. Progress goes to stderr.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name -> (threads it is a candidate for, torch.set_num_threads value, environment overrides)
CONFIGS = {
    "omp1_blas1": (1, 1, {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}),
    "torch1_blas2": (2, 1, {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "2"}),
    "torch2_passive_blas2": (2, 2, {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive",
                                    "OPENBLAS_NUM_THREADS": "2"}),
    "torch2_blas1": (2, 2, {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "1"}),
}


GPT_SHAPES = {  # vocab, context, batch, d, heads, layers
    "gpt": (96, 128, 16, 256, 4, 4),
    "gpt2": (50257, 1024, 8, 768, 12, 12),  # GPT-2 124M's shape, the GPU's benchmark
}


def build_gpt(torch, nn, name):
    GPT_VOCAB, GPT_CONTEXT, _, GPT_DIM, GPT_HEADS, GPT_LAYERS = GPT_SHAPES[name]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(GPT_DIM), nn.LayerNorm(GPT_DIM)
            self.qkv, self.proj = nn.Linear(GPT_DIM, 3 * GPT_DIM), nn.Linear(GPT_DIM, GPT_DIM)
            self.mlp = nn.Sequential(nn.Linear(GPT_DIM, 4 * GPT_DIM), nn.GELU(), nn.Linear(4 * GPT_DIM, GPT_DIM))
            self.register_buffer("mask", torch.triu(torch.ones(GPT_CONTEXT, GPT_CONTEXT, dtype=torch.bool), 1))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, GPT_HEADS, c // GPT_HEADS).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // GPT_HEADS) ** 0.5)
            att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(GPT_VOCAB, GPT_DIM), nn.Embedding(GPT_CONTEXT, GPT_DIM)
            self.blocks = nn.Sequential(*[Block() for _ in range(GPT_LAYERS)])
            self.ln_f, self.head = nn.LayerNorm(GPT_DIM), nn.Linear(GPT_DIM, GPT_VOCAB)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            return self.head(self.ln_f(self.blocks(x))).reshape(-1, GPT_VOCAB)

    return Gpt()


def build_model(torch, nn, name):
    if name in GPT_SHAPES:
        return build_gpt(torch, nn, name)
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def worker(args):
    """Time one configuration; the environment was set by the parent. Prints {"rates", "torch_version"}."""
    try:
        import torch
        from torch import nn
    except ImportError as e:
        print(f"torch_train_step: cannot import torch under {sys.executable}: {e}", file=sys.stderr)
        sys.exit(3)
    torch.set_num_threads(CONFIGS[args.worker][1])
    torch.manual_seed(0)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = build_model(torch, nn, args.model).to(device)
    if args.compile:
        model = torch.compile(model)
    per_step = args.batch
    if args.model in GPT_SHAPES:
        vocab, context, batch = GPT_SHAPES[args.model][:3]
        x = torch.randint(0, vocab, (batch, context), dtype=torch.int64, device=device)
        y = torch.randint(0, vocab, (batch * context,), dtype=torch.int64, device=device)
        per_step = batch * context  # tokens
    else:
        shape = (args.batch, 784) if args.model == "mlp" else (args.batch, 1, 28, 28)
        x = torch.randn(shape, device=device)
        y = torch.randint(0, 10, (args.batch,), dtype=torch.int64, device=device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.float16 if args.precision == "fp16" else torch.bfloat16,
                            enabled=args.precision != "fp32"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def wait_for_device():
        if on_gpu:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    wait_for_device()
    rates = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        wait_for_device()
        rates.append(per_step * args.steps / (time.perf_counter() - t0))
    print(json.dumps({"rates": rates, "torch_version": torch.__version__}))


def run_config(name, args):
    env = dict(os.environ, **CONFIGS[name][2])
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--model", args.model,
           "--threads", str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--batch", str(args.batch), "--precision", args.precision,
           "--device", args.device]
    if args.compile:
        cmd.append("--compile")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        if p.returncode == 3:  # torch not importable: no configuration can work
            sys.exit("torch_train_step: PyTorch is not available under " + sys.executable + " (scripts/setup.sh --bench)")
        print(f"  {name}: failed (exit {p.returncode})", file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn", "gpt", "gpt2"], required=True)
    ap.add_argument("--threads", type=int, choices=[1, 2], required=True)
    ap.add_argument("--steps", type=int, help="steps per timed repeat (default 30 for mlp, 10 for cnn)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--worker", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = {"mlp": 30, "cnn": 10, "gpt": 4, "gpt2": 10}[args.model]
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0 or args.batch < 1:
        ap.error("--steps, --repeats and --batch must be positive, --warmup non-negative")
    if args.worker:
        return worker(args)

    results, version = {}, None
    on_gpu = args.device.startswith("cuda")
    for name, (threads, _, env) in CONFIGS.items():
        if threads != args.threads or (on_gpu and name != "omp1_blas1"):  # on a GPU: one configuration
            continue
        print(f"torch {args.model} threads={args.threads} config {name} ({env}) ...", file=sys.stderr, flush=True)
        r = run_config(name, args)
        if r:
            results[name], version = r["rates"], r["torch_version"]
            print(f"  {name}: median {statistics.median(r['rates']):.1f} samples/s "
                  f"{[round(v, 1) for v in r['rates']]}", file=sys.stderr, flush=True)
    if not results:
        sys.exit("torch_train_step: every configuration failed")
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    best = max(medians, key=medians.get)
    print(json.dumps({
        "model": args.model, "threads": args.threads, "mode": "compiled" if args.compile else "eager", "best_config": best,
        "samples_per_s_median": medians[best], "samples_per_s_min": min(results[best]),
        "samples_per_s_max": max(results[best]), "configs": medians, "torch_version": version}))


if __name__ == "__main__":
    main()
