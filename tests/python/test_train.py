"""tessera.train.run from Python: the trainer of `tessera train`, on a dict or a TOML file."""
import os

import pytest

import tessera
from tessera import nn
from tessera.data import DataLoader, FashionMNIST


def mlp_config(tmp_path, steps=30):
    return {
        "model": {"name": "mlp", "hidden": [64]},
        "data": {"dataset": "fashion-mnist", "dir": "/usr/share/datasets/fashion-mnist"},
        "optimizer": {"name": "sgd", "lr": 0.1},
        "train": {"epochs": 1, "batch_size": 64, "seed": 0, "max_steps": steps, "output_dir": str(tmp_path / "run")},
    }


def test_run_a_dict_config_and_evaluate_its_checkpoint_from_python(tmp_path):
    result = tessera.train.run(mlp_config(tmp_path))
    assert result["steps"] == 30 and not result["server"]
    assert "accuracy" not in result  # stopped by max_steps before an epoch ended: no evaluation
    assert os.path.isdir(result["checkpoint"])
    state = tessera.load(os.path.join(result["checkpoint"], "model.safetensors"))
    # The trainer's "mlp" is this Sequential: the same keys, so its checkpoint loads as it is.
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    model.load_state_dict(state)
    model.eval()
    correct = 0
    test = FashionMNIST(train=False)
    with tessera.no_grad():
        for x, y in DataLoader(test, batch_size=2000):
            correct += int(model(x).argmax(dim=1).eq(y).sum().item())
    assert correct / len(test) > 0.5  # 30 steps of SGD: far above chance (0.1)


def test_an_epoch_ends_in_an_evaluation(tmp_path):
    config = mlp_config(tmp_path, steps=0)
    config["data"] = {"dataset": "synthetic", "samples": 256, "test_samples": 128, "classes": 4}
    result = tessera.train.run(config)
    assert result["steps"] == 4
    assert 0.0 <= result["accuracy"] <= 1.0 and result["loss"] > 0


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


def test_plan_a_zero3_job_at_four_ranks_from_python(tmp_path):
    config = mlp_config(tmp_path)
    config["data"] = {"dataset": "synthetic", "samples": 512, "test_samples": 64, "classes": 4}
    config["train"]["global_batch_size"] = 32
    one = tessera.train.plan(config, world=1)
    four = tessera.train.plan(config, world=4, hosts=2, overrides=["distributed.strategy=zero", "distributed.zero_stage=3"])
    assert four["world"] == 4 and four["hosts"] == 2 and four["sequences_agree"]
    assert [r["host"] for r in four["ranks"]] == [0, 0, 1, 1]
    whole = one["ranks"][0]["memory"]["parameters"]
    for r in four["ranks"]:
        assert abs(r["memory"]["parameters"] - whole / 4) <= 64  # each unit cut in 4, padded
        step = r["phases"]["step 3"]
        assert any(c["call"].startswith("reduce_scatter") for c in step["collectives"])
    assert "every rank of every process group issues the same collectives" in four["report"]
    predicted = tessera.train.plan(config, world=2, predict=True)["prediction"]
    assert predicted["step_s"] >= predicted["compute_s"] > 0
    assert not os.path.exists(tmp_path / "run")  # a plan writes nothing where the job would
