"""tessera.train.run(config): the trainer of `tessera train`, from Python; tessera.train.plan(config,
world): `tessera plan`'s dry run of the same job at `world` ranks.

`config` is a path to a TOML file, TOML text, or a dict of sections ({"model": {"type": "mlp"}, ...});
`overrides` are "section.key=value" strings as `--set` takes. Inside a job (tessera run, mpirun,
srun) each process runs its part; alone, it trains in this process. Returns a dict with steps,
loss, accuracy and the checkpoint written."""
import json as _json
import os as _os

from ._tessera import train as _native


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"tessera.train.run: a config value of type {type(value).__name__} has no TOML form")


def _to_toml(config, prefix=""):
    lines, tables = [], []
    for key, value in config.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in tables:
        name = f"{prefix}{key}"
        lines.append(f"[{name}]")
        lines.append(_to_toml(value, name + "."))
    return "\n".join(lines)


def _config_text(config, caller):
    if isinstance(config, dict):
        return _to_toml(config), "<dict>"
    if isinstance(config, (str, _os.PathLike)) and _os.path.isfile(config):
        return "", str(config)  # read by the C++ loader, which knows the file's directory
    if isinstance(config, str) and "=" in config:
        return config, "<string>"
    raise FileNotFoundError(f"tessera.train.{caller}: no config file {config!r} (pass a path, TOML text or a dict)")


def run(config, overrides=(), resume=""):
    text, source = _config_text(config, "run")
    return _native._run(text, source, [str(o) for o in overrides], resume)


def plan(config, world, hosts=1, steps=3, overrides=(), predict=False, link_gbit=0.0, latency_us=50.0, cores=0):
    """The job's dry run at `world` ranks spread over `hosts` on this machine, as `tessera plan`:
    a dict with each rank's memory by category, each phase's collectives and bytes per link,
    "sequences_agree", and "report" (the printed plan). predict=True adds "prediction" (the step's
    time and its parts, as --predict; link_gbit is needed across hosts)."""
    text, source = _config_text(config, "plan")
    return _json.loads(_native._plan(text, source, [str(o) for o in overrides], int(world), int(hosts), int(steps),
                                     bool(predict), float(link_gbit), float(latency_us), int(cores)))


__all__ = ["run", "plan"]
