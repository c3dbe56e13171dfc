#!/usr/bin/env python3
"""All-reduce bandwidth of tessera's backends beside Open MPI's MPI_Allreduce and torch.distributed's
Gloo, in the same run (shared/BENCHMARKING.md): every implementation runs `--repeats` times,
interleaved, and each cell is the median busbw (GB/s) with its min-max.

    python3 bench/compare_comm.py [--build build] [--nprocs 2,4] [--min-bytes 4096] [--max-bytes 268435456]
        [--backends shm,gloo,mpi,auto,shm-symmetric]

Needs the release build (tessera, tessera_ref_mpi_allreduce), openmpi-bin and PyTorch (the .venv of
scripts/setup.sh --bench, else Debian's python3-torch); the first line says which version ran.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def commands(build, n, lo, hi, backends):
    tessera = os.path.join(build, "tessera")
    sizes = ["--min-bytes", str(lo), "--max-bytes", str(hi)]
    out = {}
    for b in backends:
        if b == "shm-symmetric":  # buffers from ProcessGroup::symmetric_zeros, as DDP's buckets
            out["tessera-shm+symmetric"] = [tessera, "run", "--nproc-per-node", str(n), "--", tessera, "bench", "comm",
                                            "--backend", "shm", "--symmetric", "--json"] + sizes
        elif b == "mpi":
            out["tessera-mpi"] = MPIRUN + ["-np", str(n), tessera, "bench", "comm", "--backend", "mpi", "--json"] + sizes
        else:
            out["tessera-" + b] = [tessera, "run", "--nproc-per-node", str(n), "--", tessera, "bench", "comm",
                                   "--backend", b, "--json"] + sizes
    out["openmpi"] = MPIRUN + ["-np", str(n), os.path.join(build, "tessera_ref_mpi_allreduce"), str(lo), str(hi)]
    out["torch-gloo"] = [TORCH_PYTHON, os.path.join(ROOT, "bench", "reference", "torch_gloo_allreduce.py"),
                         "--nproc", str(n), "--min-bytes", str(lo), "--max-bytes", str(hi)]
    return out


# The reference PyTorch: the venv of scripts/setup.sh --bench (PyTorch 2 from PyPI), else Debian's 1.13.
TORCH_PYTHON = next(p for p in (os.path.join(ROOT, ".venv", "bin", "python3"), "/usr/bin/python3") if os.path.exists(p))


def torch_version():
    p = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "not installed"


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TESSERA_NUM_THREADS="1")
    p = subprocess.run(["timeout", "900"] + cmd, capture_output=True, text=True, env=env)
    rows = []
    for line in p.stdout.splitlines():
        at = line.find('{"impl"')
        if at >= 0:
            rows.append(json.loads(line[at:]))
    if p.returncode != 0:
        print(f"# {' '.join(cmd[:6])}... exited {p.returncode}: {p.stderr.strip()[-400:]}", file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--nprocs", default="2,4")
    # shm-symmetric: shm over symmetric buffers (as DDP's gradient buckets); its own ratio column,
    # since MPI_Allreduce and Gloo are given ordinary memory.
    ap.add_argument("--backends", default="shm,gloo,mpi,auto,shm-symmetric")
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"# reference: pytorch {torch_version()} ({TORCH_PYTHON}), Open MPI from {MPIRUN[0]}")
    for n in [int(x) for x in a.nprocs.split(",")]:
        cmds = commands(a.build, n, a.min_bytes, a.max_bytes, a.backends.split(","))
        samples = {}  # (impl, bytes) -> [busbw]
        wrong = {}
        for _ in range(a.repeats):
            for impl, cmd in cmds.items():
                for row in run(cmd):
                    samples.setdefault((impl, row["bytes"]), []).append(row["busbw"])
                    wrong[impl] = wrong.get(impl, 0) + row["wrong"]
        impls = list(cmds)
        sizes = sorted({b for (_, b) in samples})
        print(f"\n## allreduce float32 sum, {n} processes: busbw GB/s, median [min-max] of {a.repeats} runs")
        print("| bytes | " + " | ".join(impls) + " | best tessera / best peer | symmetric / best peer |")
        print("|" + "---|" * (len(impls) + 3))
        for size in sizes:
            cells, med = [], {}
            for impl in impls:
                v = samples.get((impl, size))
                if not v:
                    cells.append("-")
                    continue
                med[impl] = statistics.median(v)
                cells.append(f"{med[impl]:.3f} [{min(v):.3f}-{max(v):.3f}]")
            ours = max((m for i, m in med.items() if i.startswith("tessera") and "+symmetric" not in i), default=0)
            symmetric = max((m for i, m in med.items() if "+symmetric" in i), default=0)
            peers = max((m for i, m in med.items() if not i.startswith("tessera")), default=0)
            ratio = f"{ours / peers:.2f}x" if peers else "-"
            symmetric_ratio = f"{symmetric / peers:.2f}x" if peers and symmetric else "-"
            print(f"| {size} | " + " | ".join(cells) + f" | {ratio} | {symmetric_ratio} |")
        print("# wrong elements: " + ", ".join(f"{i} {w}" for i, w in wrong.items()))


if __name__ == "__main__":
    main()
