"""The elementwise losses (mse_loss, l1_loss, binary_cross_entropy_with_logits): values against NumPy's formulas,
every reduction, gradients against central differences in float64 (input and target), the stable form of BCE at
large logits, and errors that name the argument."""
import numpy as np
import pytest

import coppice
from conftest import numeric_gradient

RNG = np.random.default_rng(7)


def bce_reference(x, y):
    return np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))


LOSSES = {
    "mse_loss": (coppice.mse_loss, lambda x, y: (x - y) ** 2),
    "l1_loss": (coppice.l1_loss, lambda x, y: np.abs(x - y)),
    "binary_cross_entropy_with_logits": (coppice.binary_cross_entropy_with_logits, bce_reference),
}
REDUCE = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}


def operands(name, shape=(4, 5), dtype=np.float64):
    x = RNG.standard_normal(shape) * 3
    y = RNG.uniform(0, 1, shape) if name == "binary_cross_entropy_with_logits" else RNG.standard_normal(shape)
    return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("reduction", sorted(REDUCE))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_match_numpy(name, reduction, dtype):
    fn, ref = LOSSES[name]
    x, y = operands(name, dtype=dtype)
    out = fn(x, y, reduction=reduction)  # arrays in: a Tensor out, no graph
    assert isinstance(out, coppice.Tensor)
    want = REDUCE[reduction](ref(x.astype(np.float64), y.astype(np.float64)))
    got = out.numpy()
    assert got.shape == np.shape(want) and got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == np.float64 else 2e-6, atol=0)


def test_default_reduction_is_mean():
    x, y = operands("mse_loss")
    assert coppice.mse_loss(x, y).numpy() == coppice.mse_loss(x, y, reduction="mean").numpy()


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradients_against_finite_differences(name, reduction):
    fn, _ = LOSSES[name]
    x, y = operands(name, shape=(3, 4))
    if name == "l1_loss":
        y = x + np.where(RNG.uniform(size=x.shape) < 0.5, -1, 1) * RNG.uniform(0.1, 1, x.shape)  # away from the kink
    weights = RNG.standard_normal(x.shape)  # a scalar from the 'none' losses: sum(w * loss)
    vx = coppice.Variable(x, requires_grad=True)
    vy = coppice.Variable(y, requires_grad=True)  # the target gets a gradient too

    def scalar(a, b):
        loss = fn(a, b, reduction=reduction)
        return coppice.sum(loss * weights) if reduction == "none" else loss

    scalar(vx, vy).backward()

    def value():
        with coppice.no_grad():
            return scalar(vx, vy).item()

    for v, a in ((vx, x), (vy, y)):
        np.testing.assert_allclose(v.grad.numpy(), numeric_gradient(value, a), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_library_gradcheck(name):
    fn, _ = LOSSES[name]
    x, y = operands(name, shape=(2, 3))
    r = coppice.gradcheck(lambda a, b: fn(a, b, reduction="sum"),
                          [coppice.Variable(x, requires_grad=True), coppice.Variable(y, requires_grad=True)])
    assert r["passed"], r["message"]


def test_bce_with_logits_is_stable_and_exact_at_zero():
    # float32 logits of +-100 and +-1e4: finite losses, gradients sigmoid(x) - y.
    x = np.array([100.0, -100.0, 1e4, -1e4, 15.0, 0.0], np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0], np.float32)
    v = coppice.Variable(x, requires_grad=True)
    loss = coppice.binary_cross_entropy_with_logits(v, y, reduction="none")
    got = loss.numpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, bce_reference(x.astype(np.float64), y.astype(np.float64)), rtol=1e-6)
    assert got[4] > 0  # log1p(e^-15) = 3.06e-7, not lost to cancellation in float32
    coppice.sum(loss).backward()
    sigmoid = 0.5 * (1 + np.tanh(x.astype(np.float64) / 2))
    np.testing.assert_allclose(v.grad.numpy(), sigmoid - y, rtol=1e-6, atol=1e-7)
    assert v.grad.numpy()[5] == -0.5  # x = 0 exactly (zero-initialized logits): sigmoid(0) - 1


def test_a_training_step_reduces_the_loss():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3
    w = coppice.Variable(np.zeros(3), requires_grad=True)
    b = coppice.Variable(np.zeros(1), requires_grad=True)
    opt = coppice.optim.SGD([w, b], lr=0.1)
    losses = []
    for _ in range(50):
        loss = coppice.mse_loss(coppice.reshape(x @ coppice.reshape(w, [3, 1]) + b, [64]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 * losses[0]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_bad_inputs_name_the_argument(name):
    fn, _ = LOSSES[name]
    first = "logits" if name == "binary_cross_entropy_with_logits" else "input"
    x = np.zeros((3, 4))
    with pytest.raises(coppice.Error, match=rf"{name}: target has shape \[4, 3\] but {first} has shape \[3, 4\]"):
        fn(x, np.zeros((4, 3)))
    with pytest.raises(coppice.Error, match=rf"{name}: target has dtype f32 but {first} has dtype f64"):
        fn(x, np.zeros((3, 4), np.float32))
    with pytest.raises(coppice.Error, match=rf"{name}: {first} must be floating-point, got i64"):
        fn(np.zeros((3, 4), np.int64), np.zeros((3, 4), np.int64))
    with pytest.raises(coppice.Error, match=rf"{name}: reduction must be mean, sum or none, got 'avg'"):
        fn(x, x, reduction="avg")
    with pytest.raises(coppice.Error, match=rf"{name}: target"):
        fn(x, [[1.0, 2.0], [3.0]])  # ragged: the conversion names the argument
