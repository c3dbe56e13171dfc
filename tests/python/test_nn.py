"""nn.Module from Python: registration by assignment, state_dict, layers, keeping Python modules alive."""
import gc

import numpy as np
import pytest

import tessera
from tessera import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.scale = nn.Parameter(tessera.ones(3))
        self.register_buffer("count", tessera.zeros(1))

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 2))
        self.plain = tessera.zeros(1)  # a plain tensor attribute: not a parameter (as in PyTorch)

    def forward(self, x):
        return self.head(self.block(x))


def test_assignment_registers_parameters_children_and_buffers_in_order():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    # A module's own parameters come before its children's, as in PyTorch.
    assert names == ["block.scale", "block.fc.weight", "block.fc.bias", "head.1.weight", "head.1.bias"]
    assert sorted(net.state_dict().keys()) == sorted(names + ["block.count"])
    assert [n for n, _ in net.named_buffers()] == ["block.count"]
    assert net.num_parameters() == 4 * 3 + 3 + 3 + 3 * 2 + 2
    assert all(p.requires_grad for p in net.parameters())
    assert net.block.fc.weight.shape == (3, 4)


def test_forward_backward_through_a_python_module():
    tessera.manual_seed(0)
    net = Net()
    x = tessera.randn(5, 4)
    loss = net(x).sum()
    loss.backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_reassignment_replaces_in_place():
    block = Block()
    block.fc = nn.Linear(4, 3, bias=False)
    assert [n for n, _ in block.named_parameters()] == ["scale", "fc.weight"]
    block.scale = nn.Parameter(tessera.full((3,), 2.0))
    assert block.state_dict()["scale"].tolist() == [2.0, 2.0, 2.0]


def test_state_dict_round_trip_and_strict_errors(tmp_path):
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    x = tessera.randn(2, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    state = a.state_dict()
    del state["head.1.bias"]
    with pytest.raises(ValueError, match="head.1.bias"):
        b.load_state_dict(state)
    b.load_state_dict(state, strict=False)
    path = tmp_path / "net.safetensors"
    tessera.save(a, path)
    loaded = tessera.load(path)
    assert list(loaded.keys()) == list(a.state_dict().keys())
    c = Net()
    c.load_state_dict(loaded)
    np.testing.assert_array_equal(a(x).detach().numpy(), c(x).detach().numpy())


def test_a_python_module_held_only_by_cxx_stays_alive():
    seq = nn.Sequential(Block(), nn.ReLU())  # the Block's only reference is C++'s
    gc.collect()
    assert seq(tessera.ones(2, 4)).shape == (2, 3)
    assert type(seq[0]).__name__ == "Block"


def test_train_and_eval_reach_children():
    net = Net()
    net.eval()
    assert not net.training and not net.block.training and not net.head[1].training
    assert net.train() is net and net.block.fc.training


def test_mistakes_are_clear():
    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises((AttributeError, TypeError), match="__init__"):
        Forgot()

    class NoForward(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="NoForward"):
        nn.Sequential(NoForward())(tessera.ones(1))
    with pytest.raises(ValueError, match=r"\[linear\]|\[Linear\]|784|shape"):
        nn.Linear(784, 10)(tessera.ones(2, 5))


def test_layers_match_functional_ops():
    tessera.manual_seed(1)
    conv = nn.Conv2d(1, 2, 3, padding=1)
    x = tessera.randn(2, 1, 5, 5)
    np.testing.assert_allclose(conv(x).detach().numpy(),
                               nn.functional.conv2d(x, conv.weight, conv.bias, padding=1).detach().numpy(), rtol=1e-6)
    assert nn.MaxPool2d(2)(x).shape == (2, 1, 2, 2)
    assert nn.LayerNorm(5)(x).shape == x.shape
    assert nn.Embedding(10, 3)(tessera.tensor([[1, 2]])).shape == (1, 2, 3)
    assert nn.make_cnn()(tessera.zeros(1, 1, 28, 28)).shape == (1, 10)
    loss = nn.CrossEntropyLoss()(tessera.zeros(2, 3), tessera.tensor([0, 2]))
    assert abs(loss.item() - np.log(3)) < 1e-6
