"""What a run shows (docs/observability.md): its HTML report, TensorBoard event files, timelines.

    tessera.observe.write_report("runs/mlp")     # runs/mlp/report.html
    w = tessera.observe.TensorBoardWriter("runs/tb"); w.add_scalars(step, {"loss": 0.3})
"""
from ._tessera.observe import TensorBoardWriter, merge_traces, write_report  # noqa: F401
