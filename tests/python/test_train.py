"""tessera.train.run from Python: the trainer of `tessera train`, on a dict or a TOML file."""
import os

import pytest

import tessera


def mlp_config(tmp_path, steps=30):
    return {
        "model": {"name": "mlp", "hidden": [64]},
        "data": {"dataset": "fashion-mnist", "dir": "/usr/share/datasets/fashion-mnist"},
        "optimizer": {"name": "sgd", "lr": 0.1},
        "train": {"epochs": 1, "batch_size": 64, "seed": 0, "max_steps": steps, "output_dir": str(tmp_path / "run")},
    }


def test_run_a_dict_config(tmp_path):
    result = tessera.train.run(mlp_config(tmp_path))
    assert result["steps"] == 30 and not result["server"]
    assert 0.3 < result["accuracy"] <= 1.0
    assert os.path.isdir(result["checkpoint"])
    state = tessera.load(os.path.join(result["checkpoint"], "model.safetensors"))
    assert any(name.endswith("weight") for name in state)


def test_overrides_and_resume(tmp_path):
    tessera.train.run(mlp_config(tmp_path, steps=10))
    again = tessera.train.run(mlp_config(tmp_path, steps=10), overrides=["train.max_steps=20"], resume="latest")
    assert again["steps"] == 20


def test_a_bad_config_names_the_key(tmp_path):
    config = mlp_config(tmp_path)
    config["train"]["batch_size"] = -1
    with pytest.raises(ValueError, match="batch_size"):
        tessera.train.run(config)
    with pytest.raises(FileNotFoundError):
        tessera.train.run("no/such/config.toml")
