"""tessera.distributed.ps: parameter servers from Python.

    # tessera run --servers 1 --workers 2 -- python3 train.py
    import tessera.distributed.ps as ps
    if ps.is_server():
        ps.run_server(optimizer="sgd", momentum=0.9, mode="async")
    else:
        worker = ps.Worker(model)
        worker.start()
        for x, y in loader:
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            worker.step(lr=0.1)          # push gradients, pull the next values
        worker.finish()

The optimizer runs on the servers; mode is "sync", "async" or "ssp" (bounded staleness)."""
from .._tessera import distributed as _native

is_server = _native.ps.is_server
run_server = _native.ps.run_server
Worker = _native.ps.Worker

__all__ = ["is_server", "run_server", "Worker"]
