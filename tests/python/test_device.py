"""Devices from Python: tessera.device as torch.device, Tensor.to(device), tessera.cuda."""
import pytest

import tessera


def test_device_parses_as_torch_writes_it():
    assert str(tessera.device("cpu")) == "cpu"
    assert str(tessera.device("cuda")) == "cuda:0"
    assert tessera.device("cuda:3").index == 3
    assert tessera.device("cuda:3").type == "cuda"
    assert tessera.device("cuda:1") == tessera.device("cuda:1")
    assert tessera.device("cuda:0") == "cuda"
    assert repr(tessera.device("cpu")) == "device('cpu')"
    for bad in ["gpu", "cuda:", "cuda:-1", "cuda:1x", ""]:
        with pytest.raises(ValueError, match="not a device"):
            tessera.device(bad)


def test_a_tensor_is_on_the_cpu_and_to_cpu_is_itself():
    t = tessera.randn(3, 4)
    assert t.device == "cpu"
    assert t.device == tessera.device("cpu")
    assert t.to("cpu").numpy().tolist() == t.numpy().tolist()
    assert t.cpu().numpy().tolist() == t.numpy().tolist()


@pytest.mark.skipif(tessera.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_device_cuda_says_why():
    assert tessera.cuda.device_count() == 0
    assert tessera.cuda.unavailable_reason()
    with pytest.raises(NotImplementedError, match="cuda"):
        tessera.randn(2, 2).cuda()


@pytest.mark.skipif(not tessera.cuda.is_available(), reason="no CUDA device: " + tessera.cuda.unavailable_reason())
def test_round_trip_through_the_device():
    t = tessera.randn(5, 7)
    on_device = t.to("cuda:0")
    assert on_device.device == "cuda:0"
    assert on_device.cpu().numpy().tolist() == t.numpy().tolist()


def test_a_module_moves_in_place_and_returns_itself():
    model = tessera.nn.Linear(3, 2)
    weight = model.weight
    assert model.to("cpu") is model
    assert model.cpu() is model
    assert model.weight.device == "cpu"
    assert model.weight.detach().numpy().tolist() == weight.detach().numpy().tolist()


@pytest.mark.skipif(tessera.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_device_a_module_cannot_move_there():
    with pytest.raises(NotImplementedError, match="cuda"):
        tessera.nn.Linear(3, 2).cuda()


@pytest.mark.skipif(not tessera.cuda.is_available(), reason="no CUDA device: " + tessera.cuda.unavailable_reason())
def test_a_step_on_the_device_equals_the_cpus():
    tessera.manual_seed(0)
    cpu_model = tessera.nn.Linear(8, 4)
    tessera.manual_seed(0)
    gpu_model = tessera.nn.Linear(8, 4).cuda()
    assert gpu_model.weight.device == "cuda:0"
    x, y = tessera.randn(16, 8), tessera.randint(0, 4, (16,))
    for model, inputs, targets in ((cpu_model, x, y), (gpu_model, x.cuda(), y.cuda())):
        opt = tessera.optim.SGD(model.parameters(), lr=0.1)
        loss = tessera.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        opt.step()
    got, want = gpu_model.weight.detach().cpu().numpy(), cpu_model.weight.detach().numpy()
    assert abs(got - want).max() < 1e-5


def test_tf32_is_off_unless_asked():
    assert tessera.cuda.allow_tf32() is False
    tessera.cuda.set_allow_tf32(True)
    assert tessera.cuda.allow_tf32() is True
    tessera.cuda.set_allow_tf32(False)
    assert tessera.cuda.allow_tf32() is False
