"""Training functions of test_ray.py. The workers load them by reference (cloudpickle pickles an
importable module's function by name), so they live in a module that does nothing when imported."""


def all_reduce_of_ranks(config):
    import tessera
    import tessera.distributed as dist
    import tessera.ray

    dist.init_process_group()
    context = tessera.ray.get_context()
    if context.attempt == 0 and context.rank == config["fail_rank"]:
        raise RuntimeError("planned failure of the first attempt")
    t = tessera.full([3], float(context.rank + 1))
    dist.all_reduce(t)
    tessera.ray.report({"step": 1, "sum": t.numpy()[0], "world": context.world_size, "rank": context.rank})
    return {"rank": context.rank, "sum": t.numpy().tolist(), "attempt": context.attempt}


def always_fails(config):
    raise RuntimeError("this function always fails")
