#!/usr/bin/python3
"""`tessera bench ray --parts serve`: `tessera serve` beside Ray Serve (dynamic batching with @serve.batch),
the same CNN from the same safetensors checkpoint, under the same wrk load, in one run.

Run with the reference's interpreter (.venv/bin/python3: Ray Serve and PyTorch from PyPI), TESSERA_BIN set
(`tessera bench ray` does this):

    .venv/bin/python3 bench/ray_serve.py [--checkpoint RUN_OR_STEP_DIR] [--clients 1,8,64] [--seconds 5]

Without --checkpoint it first trains the CNN of examples/cnn.toml for 100 steps (the weights' values do
not change the cost of serving them). Both servers: one process answering POST /v1/predict with one
28x28 image per request as base64 float32 (the body of `tessera bench serve`), the softmax over the 10
classes and the top class in the reply; batches of at most 32 waiting at most 5 ms; the model on this
machine's 2 cores (tessera serve's --threads 2; Ray's replica with num_cpus 2 and torch.set_num_threads(2),
beside Ray's HTTP proxy). wrk (Debian's) runs each client count for --seconds after a 1 s warm-up; the
table gives requests/s and wrk's p50/p99 latency. Before the load, the two servers' answers to the same
image are compared (same top class, probabilities within 1e-4). The last line of stdout is one JSON object.
"""
import argparse
import base64
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MAX_BATCH, MAX_WAIT_MS, THREADS = 32, 5.0, 2


def load_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {entry['dtype']}; this reader takes F32")
        start, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype=np.float32).reshape(entry["shape"])
    return tensors


def newest_step(run_or_step):
    if os.path.exists(os.path.join(run_or_step, "model.safetensors")):
        return run_or_step
    steps = os.path.join(run_or_step, "checkpoints")
    names = sorted(n for n in os.listdir(steps) if n.startswith("step-") and ".tmp" not in n)
    return os.path.join(steps, names[-1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(script, port, clients, seconds):
    threads = min(2, clients)
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{clients}", f"-d{seconds}s", "--latency", "-s", script,
                          f"http://127.0.0.1:{port}/v1/predict"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=seconds + 60).stdout

    def ms(pattern):
        m = re.search(pattern, out)
        if not m:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    errors = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses:\s+([0-9]+)", out))
    socket_errors = re.search(r"Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)", out)
    if socket_errors:
        errors += sum(int(x) for x in socket_errors.groups())
    return {"requests_per_s": float(rate.group(1)) if rate else 0.0, "p50_ms": ms(r"\n\s+50%\s+([0-9.]+)(us|ms|s)"),
            "p99_ms": ms(r"\n\s+99%\s+([0-9.]+)(us|ms|s)"), "errors": errors}


def post(port, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/predict", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def start_tessera_serve(tessera_bin, checkpoint):
    proc = subprocess.Popen([tessera_bin, "--threads", str(THREADS), "serve", checkpoint, "--port", "0",
                             "--max-batch", str(MAX_BATCH), "--max-wait-ms", str(MAX_WAIT_MS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, text = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            text += line
            m = re.search(r"listening on http://127\.0\.0\.1:([0-9]+)", line)
            if m:
                return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError(f"tessera serve did not start:\n{text}")


def start_ray_serve(weights_path, port):
    import numpy as np
    from ray import serve
    from starlette.requests import Request

    @serve.deployment(ray_actor_options={"num_cpus": THREADS}, max_ongoing_requests=256)
    class CnnClassifier:
        def __init__(self, path):
            import torch
            from torch import nn
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            torch.set_num_threads(THREADS)
            self.torch = torch
            self.model = nn.Sequential(
                nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
            # tessera's state_dict names are PyTorch's: the checkpoint loads as it is.
            state = {k: torch.from_numpy(v.copy()) for k, v in load_safetensors(path).items()}
            self.model.load_state_dict(state)
            self.model.eval()

        @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=MAX_WAIT_MS / 1000)
        async def predict(self, images):
            with self.torch.no_grad():
                probabilities = self.torch.softmax(self.model(self.torch.from_numpy(np.stack(images))), dim=1)
            outputs = []
            for row in probabilities.tolist():
                label = max(range(len(row)), key=row.__getitem__)
                outputs.append({"label": label, "probabilities": row,
                                "top_k": [{"label": label, "probability": row[label]}]})
            return outputs

        async def __call__(self, request: Request):
            body = await request.json()
            shape = body["inputs"]["shape"]
            image = np.frombuffer(base64.b64decode(body["inputs"]["b64"]), dtype="<f4").reshape(shape[1:])
            return {"outputs": [await self.predict(image)]}

    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(CnnClassifier.bind(weights_path), name="cnn", route_prefix="/v1/predict")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    import numpy as np
    import torch  # noqa: F401  (before tessera's CUDA libraries: see bench/ray_train.py)
    import ray
    tessera_bin = os.environ.get("TESSERA_BIN", "tessera")
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="tessera-bench-ray-serve-") as tmp:
        run = args.checkpoint
        if not run:
            run = os.path.join(tmp, "cnn")
            repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            subprocess.run([tessera_bin, "train", os.path.join(repo, "examples", "cnn.toml"), "--set",
                            f"train.output_dir={run}", "--set", "train.max_steps=100"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=600)
        step = newest_step(run)
        sample = np.random.default_rng(7).random((1, 1, 28, 28), dtype=np.float32)
        body = json.dumps({"inputs": {"b64": base64.b64encode(sample.astype("<f4").tobytes()).decode(),
                                      "shape": [1, 1, 28, 28]}, "top_k": 1})
        script = os.path.join(tmp, "predict.lua")
        with open(script, "w", encoding="utf-8") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    f"wrk.body = '{body}'\n")
        results, answers = {}, {}

        def measure(side, port):
            """The server's answer to the sample, then wrk at each client count after a warm-up."""
            answers[side] = post(port, body)["outputs"][0]
            wrk(script, port, min(8, clients[-1]), 1)
            results[side] = {c: wrk(script, port, c, args.seconds) for c in clients}

        print("bench ray serve: tessera serve", file=sys.stderr, flush=True)
        proc, port = start_tessera_serve(tessera_bin, step)
        try:
            measure("tessera", port)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        print("bench ray serve: Ray Serve", file=sys.stderr, flush=True)
        ray.init(num_cpus=2 * THREADS, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 1024 * 1024)
        port = free_port()
        start_ray_serve(os.path.join(step, "model.safetensors"), port)
        try:
            measure("ray_serve", port)
        finally:
            from ray import serve
            serve.shutdown()
            ray.shutdown()
    same_label = answers["tessera"]["label"] == answers["ray_serve"]["label"]
    gap = max(abs(a - b) for a, b in zip(answers["tessera"]["probabilities"], answers["ray_serve"]["probabilities"]))
    print(f"\nbench ray serve: the CNN of {step}; batches <= {MAX_BATCH}, wait <= {MAX_WAIT_MS:g} ms, {THREADS} threads; "
          f"wrk {args.seconds} s per cell; Ray {ray.__version__}, PyTorch {torch.__version__}")
    print(f"same answer: top class {'equal' if same_label else 'DIFFERENT'}, probabilities within {gap:.2e}")
    print(f"{'clients':>7} {'side':12} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for c in clients:
        for side, name in (("tessera", "tessera"), ("ray_serve", "Ray Serve")):
            r = results[side][c]
            print(f"{c:7d} {name:12} {r['requests_per_s']:11.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['errors']:7d}")
        ratio = results["tessera"][c]["requests_per_s"] / max(results["ray_serve"][c]["requests_per_s"], 1e-9)
        print(f"{c:7d} {'ratio':12} {ratio:10.2f}x")
    print(json.dumps({"ray_version": ray.__version__, "torch_version": torch.__version__, "same_label": same_label,
                      "probability_gap": gap, "results": results}))
    if not same_label or gap > 1e-4:
        print("bench ray serve: the two servers answer the same image differently: not the same model", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
