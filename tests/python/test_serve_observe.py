"""tessera.serve.Predictor and tessera.observe from Python: a trained checkpoint answering predictions
(equal to the same model run by hand), the run's report, TensorBoard event files, and a timeline."""
import json
import os
import struct

import numpy as np
import pytest

import tessera
from tessera import nn
from tessera.serve import Predictor


def config(tmp_path, **train):
    t = {"epochs": 1, "batch_size": 32, "seed": 0, "output_dir": str(tmp_path / "run")}
    t.update(train)
    return {
        "model": {"name": "mlp", "hidden": [32]},
        "data": {"dataset": "synthetic", "samples": 256, "test_samples": 64, "classes": 4},
        "optimizer": {"name": "adam", "lr": 0.01},
        "train": t,
    }


def test_a_predictor_answers_as_the_checkpoints_model(tmp_path):
    result = tessera.train.run(config(tmp_path))
    p = Predictor(str(tmp_path / "run"))
    assert p.model_name == "mlp" and p.outputs == 4 and not p.generates_text
    assert p.sample_shape == [784]
    x = tessera.rand(5, 784)
    probabilities = p.predict(x).numpy()
    assert probabilities.shape == (5, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 4))
    model.load_state_dict(tessera.load(os.path.join(result["checkpoint"], "model.safetensors")))
    model.eval()
    with tessera.no_grad():
        expected = nn.functional.softmax(model(x), dim=1).numpy()
    np.testing.assert_allclose(probabilities, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        p.generate("hello")
    with pytest.raises(OSError):
        Predictor(str(tmp_path / "no-such-run"))


def test_the_report_the_tensorboard_files_and_the_timeline_of_a_run(tmp_path):
    tb = tmp_path / "tb"
    tessera.train.run(config(tmp_path), overrides=["observability.tensorboard=" + str(tb), "observability.trace=true"])
    page = tessera.observe.write_report(str(tmp_path / "run"))
    html = open(page).read()
    assert page.endswith("report.html") and html.count("<svg ") >= 4 and "Timeline of step" in html
    files = [f for f in os.listdir(tb) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1
    data = open(tb / files[0], "rb").read()
    (length,) = struct.unpack_from("<Q", data, 0)
    assert b"brain.Event:2" in data[12:12 + length] and b"step/loss" in data
    trace = tmp_path / "run" / "trace" / "rank-0.json"
    merged = json.loads(tessera.observe.merge_traces([str(trace)]))
    names = {e["name"] for e in merged["traceEvents"]}
    assert {"forward", "backward", "optimizer", "data"} <= names


def test_a_tensorboard_writer_from_python(tmp_path):
    w = tessera.observe.TensorBoardWriter(str(tmp_path / "tb"))
    w.add_scalars(3, {"accuracy": 0.5, "loss": 1.25}, wall_time=1700000000.0)
    data = open(w.path, "rb").read()
    assert b"accuracy" in data and struct.pack("<f", 1.25) in data
