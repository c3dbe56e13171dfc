"""The examples of examples/python, run as a user would (short runs)."""
import re

from conftest import python_args, run


def accuracy(out):
    match = re.search(r"test accuracy ([0-9.]+)", out)
    assert match, out
    return float(match.group(1))


def test_the_one_process_mlp_learns():
    code, out = run(python_args("examples/python/train_mlp.py", "--max-steps", "300"))
    assert code == 0, out
    assert accuracy(out) > 0.75, out


def test_the_custom_module_trains_saves_and_loads(tmp_path):
    code, out = run(python_args("examples/python/custom_module.py", "--max-steps", "150",
                                "--out", str(tmp_path / "custom.safetensors")))
    assert code == 0, out
    # The module's own parameter first, then its children's in assignment order (as PyTorch).
    assert "parameters: log_temperature, stem.weight, stem.bias, blocks.0.fc1.weight" in out, out
    assert "identical on 10 of 10 batches" in out, out
    assert accuracy(out) > 0.7, out


def test_the_parameter_server_job(tessera_bin, tmp_path):
    code, out = run([tessera_bin, "run", "--servers", "1", "--workers", "2", "--",
                     *python_args("examples/python/train_ps.py", "--max-steps", "150", "--mode", "sync")])
    assert code == 0, out
    assert "worker 0 done: 150 steps" in out and "worker 1 done: 150 steps" in out, out
    # Synchronous: each of the 150 steps is one update, applied once both workers pushed it.
    assert "server 0: 150 updates, workers finished [0, 1]" in out, out
    assert min(float(a) for a in re.findall(r"test accuracy ([0-9.]+)", out)) > 0.7, out


def test_train_run_runs_a_parameter_server_config(tessera_bin, tmp_path):
    script = tmp_path / "ps_config.py"
    script.write_text(
        "import tessera\n"
        "r = tessera.train.run({'model': {'name': 'mlp', 'hidden': [64]},\n"
        "    'optimizer': {'name': 'sgd', 'lr': 0.05},\n"
        f"    'train': {{'epochs': 1, 'batch_size': 64, 'max_steps': 40, 'output_dir': '{tmp_path / 'run'}'}},\n"
        "    'distributed': {'strategy': 'ps', 'ps_mode': 'sync'}})\n"
        "print('server' if r['server'] else f\"worker steps {r['steps']}\", flush=True)\n")
    code, out = run([tessera_bin, "run", "--servers", "1", "--workers", "2", "--", *python_args(str(script))])
    assert code == 0, out
    assert out.count("worker steps 40") == 2 and "server" in out, out


def test_the_ddp_example_under_tessera_run(tessera_bin):
    code, out = run([tessera_bin, "run", "--nproc-per-node", "2", "--",
                     *python_args("examples/python/train_ddp.py", "--max-steps", "200")])
    assert code == 0, out
    assert "2 rank(s)" in out, out
    assert accuracy(out) > 0.7, out
