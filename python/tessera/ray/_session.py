"""What a worker started by tessera.ray sees of its job: its context and `report`.

Kept free of `import ray`: a worker is a plain process of `tessera run` (a C++ `tessera train`, or a
Python training function), so reporting costs it a line appended to a file, never a Ray import. The
file's path and the context come from the environment the worker's actor gives it (the variables
below are the contract between _actor.py and this module; nothing else reads them)."""
import json
import math
import os
import time
from dataclasses import dataclass

METRICS_FILE_VARIABLE = "TESSERA_RAY_METRICS"      # where report() appends this rank's records
RESULT_FILE_VARIABLE = "TESSERA_RAY_RESULT"        # where a training function's return value goes
FUNCTION_FILE_VARIABLE = "TESSERA_RAY_FUNCTION"    # the pickled training function and its config
ATTEMPT_VARIABLE = "TESSERA_RAY_ATTEMPT"           # 0 for the first start, +1 for each restart
STORAGE_VARIABLE = "TESSERA_RAY_STORAGE"           # the job's storage_path (shared by its attempts)


@dataclass(frozen=True)
class Context:
    """This worker's place in its job (Ray Train's `ray.train.get_context()`)."""
    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    attempt: int        # 0 on the first start; a restart after a failure is 1, 2, ...
    storage_path: str   # TesseraTrainer(storage_path=...): where checkpoints outlive an attempt ("" if none)


def get_context():
    """The context of this worker. Outside a tessera.ray job: a job of one, attempt 0."""
    env = os.environ
    return Context(rank=int(env.get("RANK", "0")), world_size=int(env.get("WORLD_SIZE", "1")),
                   local_rank=int(env.get("LOCAL_RANK", "0")), node_rank=int(env.get("NODE_RANK", "0")),
                   attempt=int(env.get(ATTEMPT_VARIABLE, "0")), storage_path=env.get(STORAGE_VARIABLE, ""))


def _plain(value, key):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return value if not isinstance(value, float) or math.isfinite(value) else str(value)
    if hasattr(value, "item"):  # a one-element tensor or NumPy scalar
        return _plain(value.item(), key)
    raise TypeError(f"tessera.ray.report: metric '{key}' is a {type(value).__name__}; report numbers, strings or bools")


def report(metrics):
    """Sends this rank's metrics to the driver (TesseraTrainer.fit's Result and its on_report callback),
    as Ray Train's `ray.train.report`. Every rank may report; the driver keeps rank 0's history. Outside a
    tessera.ray job it does nothing, so the same function also runs alone."""
    if not isinstance(metrics, dict):
        raise TypeError(f"tessera.ray.report takes a dict of metrics, not a {type(metrics).__name__}")
    path = os.environ.get(METRICS_FILE_VARIABLE)
    if not path:
        return
    record = {str(k): _plain(v, k) for k, v in metrics.items()}
    record.setdefault("unix_time", time.time())
    # One write of one line: the actor reading the file never sees half a record.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
