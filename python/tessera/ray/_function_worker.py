"""The program a tessera.ray worker runs for a Python training function: `python -m
tessera.ray._function_worker`, started by `tessera run` (so the env contract is set and
tessera.distributed.init_process_group() joins the job). It loads the function the actor wrote, calls
it, and leaves its return value where the actor reads it."""
import os
import pickle
import sys

from ._session import FUNCTION_FILE_VARIABLE, RESULT_FILE_VARIABLE


def main():
    with open(os.environ[FUNCTION_FILE_VARIABLE], "rb") as f:
        function, config = pickle.load(f)  # written by ray.cloudpickle, which loading imports
    value = function(config) if config is not None else function()
    path = os.environ[RESULT_FILE_VARIABLE]
    try:
        data = pickle.dumps(value)
    except Exception as e:  # noqa: BLE001 - the run succeeded; only its value cannot travel
        print(f"tessera.ray: rank {os.environ.get('RANK', '?')}'s return value cannot be pickled ({e}); "
              "the driver gets None", file=sys.stderr)
        return 0
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
