"""coppice.nn and coppice.optim from Python: an MLP and a small CNN written and trained in Python, modules written
in Python, state dicts, the zoo, and errors."""
import gc
import traceback

import numpy as np
import pytest

import coppice
from coppice import nn, optim


def xor_of_two_directions(n, seed=0):
    """16-D Gaussian points labelled by whether they lie on the same side of two random hyperplanes: no linear
    model does better than chance, an MLP learns it."""
    rng = np.random.default_rng(seed)
    u, v = np.random.default_rng(100).standard_normal((2, 16))
    x = rng.standard_normal((n, 16)).astype(np.float32)
    return x, ((x @ u > 0) ^ (x @ v > 0)).astype(np.int64)


def train_steps(model, opt, x, y, steps, batch=64):
    for step in range(steps):
        i = (step * batch) % len(x)
        loss = coppice.cross_entropy(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def accuracy(model, x, y):
    with coppice.no_grad():
        return float((coppice.argmax(model(x), 1).numpy() == y).mean())


def test_an_mlp_written_in_python_learns_what_a_linear_model_cannot():
    """400 steps of SGD on 4096 examples: the MLP above 90 % on held-out points, the linear model near chance."""
    x, y = xor_of_two_directions(4096)
    xt, yt = xor_of_two_directions(1024, seed=1)
    coppice.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    assert [name for name, _ in mlp.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight",
                                                            "4.bias"]
    train_steps(mlp, optim.SGD(mlp.parameters(), lr=0.1, momentum=0.9), x, y, 400)
    linear = nn.Sequential(nn.Linear(16, 2, seed=0))
    train_steps(linear, optim.SGD(linear.parameters(), lr=0.1, momentum=0.9), x, y, 400)
    mlp_acc, linear_acc = accuracy(mlp, xt, yt), accuracy(linear, xt, yt)
    print(f"\nMLP {100 * mlp_acc:.1f} %, linear {100 * linear_acc:.1f} % on held-out points")
    assert mlp_acc > 0.9
    assert linear_acc < 0.6


def bars(n, seed):
    """8x8 noisy images holding a horizontal (class 0) or a vertical (class 1) bar at a random row or column."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = 0.5 * rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    at = rng.integers(0, 8, n)
    for i in range(n):
        if y[i]:
            x[i, 0, :, at[i]] += 2
        else:
            x[i, 0, at[i], :] += 2
    return x, y.astype(np.int64)


def test_a_small_cnn_learns_bars_with_adam():
    x, y = bars(1024, seed=0)
    xt, yt = bars(256, seed=1)
    coppice.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(128, 2))
    opt = optim.Adam(cnn.parameters(), lr=0.01)
    train_steps(cnn, opt, x, y, 100, batch=32)
    assert accuracy(cnn, xt, yt) > 0.95
    state = opt.state(cnn.parameter("0.weight"))
    assert state["step"] == 100 and state["exp_avg"].shape == [8, 1, 3, 3]


class Gated(nn.Module):
    """A module written in Python: a linear layer whose outputs are scaled by a learned gate."""

    def __init__(self, n_in, n_out):
        super().__init__("Gated")
        self.fc = self.register_module("fc", nn.Linear(n_in, n_out, seed=3))
        self.register_parameter("gate", np.ones(n_out, np.float32))

    def forward(self, x):
        return coppice.relu(self.fc(x)) * self.parameter("gate")


def test_a_module_written_in_python_trains_inside_sequential():
    model = nn.Sequential(Gated(16, 32), nn.Linear(32, 2, seed=4))
    gc.collect()  # the Gated object lives on in the Sequential, with its forward
    assert [name for name, _ in model.named_parameters()] == ["0.gate", "0.fc.weight", "0.fc.bias", "1.weight",
                                                              "1.bias"]
    assert [name for name, _ in model.named_modules()] == ["0", "0.fc", "1"]
    assert isinstance(model[0], Gated) and model.submodule("0.fc").type_name == "Linear"
    x, y = xor_of_two_directions(512)
    gate_before = model.parameter("0.gate").numpy().copy()
    first = coppice.cross_entropy(model(x), y).item()
    last = train_steps(model, optim.SGD(model.parameters(), lr=0.05, momentum=0.9), x, y, 50)
    assert last < first
    assert not np.array_equal(model.parameter("0.gate").numpy(), gate_before)  # the gate is trained too


def test_an_exception_in_a_python_forward_comes_back_with_its_traceback():
    class Broken(nn.Module):
        def forward(self, x):
            raise ArithmeticError("no forward today")

    with pytest.raises(ArithmeticError, match="no forward today") as info:
        nn.Sequential(nn.Linear(4, 4), Broken())(np.ones((1, 4), np.float32))
    assert "forward" in "".join(traceback.format_tb(info.value.__traceback__))


def test_state_dict_round_trip_and_the_zoo():
    a = nn.make_model("mlp", sizes=[8, 16, 4], seed=1)
    assert [name for name, _ in a.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    b = nn.make_model("mlp", sizes=[8, 16, 4], seed=2)
    x = np.ones((3, 8), np.float32)
    assert not np.array_equal(a(x).numpy(), b(x).numpy())
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    with pytest.raises(coppice.Error, match="fc9.weight"):
        b.load_state_dict({"fc9.weight": np.zeros((4, 16), np.float32)})


def test_gelu_in_both_forms():
    """nn.GELU() is the exact GELU, nn.GELU(approximate='tanh') GPT-2's tanh approximation (PyTorch's spelling,
    checked against its float64 formula); another approximate is a ValueError naming it."""
    x = np.linspace(-4, 4, 33).reshape(3, 11)
    exact, approx = nn.GELU(), nn.GELU(approximate="tanh")
    assert exact.approximate == "none" and approx.approximate == "tanh"
    assert nn.GELU(approximate="none").approximate == "none"
    np.testing.assert_array_equal(exact(x).numpy(), coppice.gelu(x).numpy())
    np.testing.assert_array_equal(approx(x).numpy(), coppice.gelu_tanh(x).numpy())
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(approx(x).numpy(), want, rtol=1e-12, atol=1e-14)
    assert 4e-4 < np.abs(approx(x).numpy() - exact(x).numpy()).max() < 5e-4
    with pytest.raises(ValueError, match="nn.GELU: approximate must be 'none' or 'tanh', got 'erf'"):
        nn.GELU(approximate="erf")


def test_the_zoo_transformers_take_the_gelu_form():
    """make_model's gelu option, 'erf' (the default) or 'tanh', for the gpt (and vit, char_lm): the same
    parameters, other logits; another value is refused naming the option, the value and the accepted ones."""
    small = dict(vocab_size=7, context=8, dim=8, layers=1, heads=2, seed=3)
    tokens = np.array([[0, 3, 1, 6, 2, 2, 5, 4]], np.int64)
    erf, default, tanh = (nn.make_model("gpt", **small, **g) for g in ({"gelu": "erf"}, {}, {"gelu": "tanh"}))
    assert [n for n, _ in tanh.named_parameters()] == [n for n, _ in erf.named_parameters()]
    np.testing.assert_array_equal(default(tokens).numpy(), erf(tokens).numpy())
    assert not np.array_equal(tanh(tokens).numpy(), erf(tokens).numpy())
    for name in ("vit", "char_lm"):
        nn.make_model(name, dim=16, heads=2, gelu="tanh")
    with pytest.raises(coppice.Error, match="model 'gpt': option 'gelu': is 'exact'; known: erf, tanh"):
        nn.make_model("gpt", **small, gelu="exact")


def test_layer_and_optimizer_errors_name_what_is_wrong():
    with pytest.raises(coppice.Error, match="Linear: input's last dim is 5, expected in_features = 4"):
        nn.Linear(4, 2)(np.ones((3, 5), np.float32))
    with pytest.raises(coppice.Error, match="sgd: group 0 has a negative learning rate -1"):
        optim.SGD(nn.Linear(2, 2).parameters(), lr=-1)
    with pytest.raises(coppice.Error, match="adam: unknown hyperparameter 'momentum'"):
        optim.Adam(nn.Linear(2, 2).parameters()).option("momentum")
    with pytest.raises(coppice.Error, match="only a Module written in Python registers its own"):
        nn.Linear(2, 2).register_parameter("extra", np.ones(2, np.float32))
    with pytest.raises(coppice.Error, match="needs a method forward"):
        nn.Module("NoForward")(np.ones(2, np.float32))
    with pytest.raises(coppice.Error, match="Sequential: index 5 out of range for 1 modules"):
        nn.Sequential(nn.ReLU())[5]


def test_the_package_layout():
    from coppice.optim import SGD  # noqa: F401  (the submodules import by name)
    import coppice.nn  # noqa: F401
    names = {}
    exec("from coppice import *", names)
    assert "Variable" in names and "relu" in names and "nn" in names
    assert "sum" not in names and "max" not in names  # Python's own stay
    assert coppice.sum(np.ones(3)).item() == 3.0
