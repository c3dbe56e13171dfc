"""tessera jobs on a Ray cluster (docs/distributed.md, "Ray").

    from tessera.ray import TesseraTrainer
    result = TesseraTrainer(config="examples/mlp.toml", num_workers=2, placement_strategy="SPREAD").fit()

or a Python training function, which joins the job with tessera.distributed.init_process_group() and
reports with tessera.ray.report({...}). `tessera train CONFIG --launcher ray --nproc N` does the same
from the CLI. TesseraTrainer needs Ray (`pip install ray`); report and get_context, which the workers
call, do not import it."""
from ._session import Context, get_context, report  # noqa: F401

_NEEDS_RAY = ("TesseraTrainer", "Result", "TrainingFailedError")


def __getattr__(name):
    # Imported on first use: a worker that only reports never pays for importing Ray.
    if name in _NEEDS_RAY:
        from . import _trainer
        return getattr(_trainer, name)
    raise AttributeError(f"module 'tessera.ray' has no attribute {name!r}")
