"""Run by test_distributed.py under `tessera run` with 2 ranks: rank 1 leaves before the all-reduce;
rank 0's all-reduce must end within its timeout in a Python exception naming rank 1."""
import os

import tessera
import tessera.distributed as dist

dist.init_process_group(timeout=5.0)
if dist.get_rank() == 1:
    os._exit(0)
try:
    dist.all_reduce(tessera.ones(4))
    print("rank 0: the all-reduce completed without rank 1", flush=True)
except (TimeoutError, tessera.PeerFailureError) as e:
    print(f"rank 0 caught {type(e).__name__}: {e}", flush=True)
    os._exit(0)
