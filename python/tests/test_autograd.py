"""coppice.Variable and the differentiable functions: gradients against finite differences, no_grad, operators,
and errors that name what is wrong."""
import numpy as np
import pytest

import coppice
from conftest import numeric_gradient


def check_gradients(loss_of, arrays):
    """loss_of(*variables) -> a one-element Variable; every array's gradient by backward against central
    differences, in float64."""
    variables = [coppice.Variable(a, requires_grad=True) for a in arrays]
    loss = loss_of(*variables)
    loss.backward()
    for a, v in zip(arrays, variables):
        assert v.data.data_ptr() == a.ctypes.data  # the leaf is the array's memory

        def value():
            with coppice.no_grad():
                return loss_of(*variables).item()

        np.testing.assert_allclose(v.grad.numpy(), numeric_gradient(value, a), rtol=1e-6, atol=1e-8)


RNG = np.random.default_rng(0)


def f64(*shape):
    return RNG.standard_normal(shape)


def test_linear_layer_ops_match_finite_differences():
    """matmul, linear with bias, relu, sub, mul by a scalar, mean: an MLP's ops."""
    target = f64(5, 3)

    def loss(x, w1, b1, w2):
        h = coppice.relu(coppice.linear(x, w1, b1))
        d = coppice.matmul(h, w2) - target
        return coppice.mean(d * d * 0.5)

    check_gradients(loss, [f64(5, 4), f64(6, 4), f64(6), f64(6, 3)])


def gelu_tanh_reference(x):
    """GPT-2's tanh GELU (PyTorch's gelu(approximate='tanh')), in float64."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def test_gelu_mlp_is_linear_gelu_linear():
    """gelu_mlp: one op whose gradients match finite differences and equal the three ops'."""
    check_gradients(lambda x, w1, b1, w2: coppice.mean(coppice.gelu_mlp(x, w1, b1, w2) ** 2),
                    [f64(5, 4), f64(6, 4), f64(6), f64(3, 6)])
    x, w1, b1, w2, b2 = f64(5, 4), f64(6, 4), f64(6), f64(3, 6), f64(3)
    fused = coppice.gelu_mlp(x, w1, b1, w2, b2).numpy()
    composite = coppice.linear(coppice.gelu(coppice.linear(x, w1, b1)), w2, b2).numpy()
    np.testing.assert_array_equal(fused, composite)
    np.testing.assert_array_equal(coppice.gelu_mlp(x, w1, b1, w2, b2, approximate="none").numpy(), fused)


def test_gelu_mlp_with_the_tanh_gelu():
    """gelu_mlp(..., approximate='tanh'): gelu_tanh between the layers, as PyTorch's F.gelu spells it; its
    gradients match finite differences, its values and gradients equal the three ops' (linear, gelu_tanh, linear),
    and the values those of the float64 formula; any other approximate is a ValueError."""
    check_gradients(lambda x, w1, b1, w2: coppice.mean(coppice.gelu_mlp(x, w1, b1, w2, approximate="tanh") ** 2),
                    [f64(5, 4), f64(6, 4), f64(6), f64(3, 6)])
    arrays = [f64(2, 5, 4), f64(6, 4), f64(6), f64(3, 6), f64(3)]
    x, w1, b1, w2, b2 = arrays
    reference = gelu_tanh_reference(x @ w1.T + b1) @ w2.T + b2

    def run(fused):
        vs = [coppice.Variable(a, requires_grad=True) for a in arrays]
        if fused:
            y = coppice.gelu_mlp(*vs, approximate="tanh")
        else:
            y = coppice.linear(coppice.gelu_tanh(coppice.linear(vs[0], vs[1], vs[2])), vs[3], vs[4])
        coppice.sum(y * y).backward()
        return [y.numpy()] + [v.grad.numpy() for v in vs]

    fused, composite = run(True), run(False)
    for got, want in zip(fused, composite):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(fused[0], reference, rtol=1e-12, atol=1e-12)
    exact = coppice.gelu_mlp(x, w1, b1, w2, b2).numpy()
    assert np.abs(exact - fused[0]).max() > 1e-6  # the exact GELU is another function
    with pytest.raises(ValueError, match="gelu_mlp: approximate must be 'none' or 'tanh', got 'erf'"):
        coppice.gelu_mlp(x, w1, b1, w2, b2, approximate="erf")


@pytest.mark.parametrize("name, reference", [
    ("exp", np.exp), ("tanh", np.tanh), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("softplus", lambda x: np.where(x > 20, x, np.log1p(np.exp(x)))),
    ("gelu_tanh", gelu_tanh_reference),
])
def test_unary_ops_of_the_table_match_numpy_and_finite_differences(name, reference):
    """The unary ops come from one table (tensor/unary_ops.h): each is a module function with a docstring, its
    values NumPy's, its gradient the finite differences'."""
    op = getattr(coppice, name)
    assert op.__doc__
    x = f64(4, 3) * 3
    np.testing.assert_allclose(op(x).numpy(), reference(x), rtol=1e-12, atol=1e-14)
    check_gradients(lambda v: coppice.sum(op(v)), [x])


@pytest.mark.parametrize("name, reference, doc, numbers", [
    ("add", np.add, "a + b, broadcasting.", "either side"),
    ("sub", np.subtract, "a - b, broadcasting.", "either side"),
    ("mul", np.multiply, "a * b, broadcasting (a sparse operand keeps its pattern).", "either side"),
    ("div", np.divide, "a / b, broadcasting.", "either side"),
    ("pow", np.power, "a ** b (b a number or an array).", "exponent"),
    ("maximum", np.maximum, "Elementwise maximum (ties split the gradient).", "none"),
    ("minimum", np.minimum, "Elementwise minimum.", "none"),
])
def test_binary_ops_of_the_table_match_numpy_and_finite_differences(name, reference, doc, numbers):
    """The differentiable binary ops come from one table (tensor/binary_ops.h): each is a module function with
    the table's docstring, its values NumPy's (broadcasting), its gradients the finite differences', and a number
    for an operand where the table allows one, else an error saying so."""
    op = getattr(coppice, name)
    assert op.__doc__.rstrip().endswith(doc)
    a, b = np.abs(f64(4, 3)) + 0.5, f64(3)  # pow: a positive base
    np.testing.assert_allclose(op(a, b).numpy(), reference(a, b), rtol=1e-12, atol=1e-14)
    check_gradients(lambda x, y: coppice.sum(op(x, y)), [a, b])
    x = coppice.Variable(a, requires_grad=True)
    if numbers == "none":
        with pytest.raises(coppice.Error, match=f"{name}: an operand is a number; pass an array"):
            op(x, 2.0)
    else:
        np.testing.assert_allclose(op(x, 2.0).numpy(), reference(a, 2.0), rtol=1e-12)
    if numbers == "either side":
        np.testing.assert_allclose(op(2.0, x).numpy(), reference(2.0, a), rtol=1e-12)
    else:
        with pytest.raises(coppice.Error, match=f"{name}: an operand is a number; pass an array"):
            op(2.0, x)


def test_conv_pool_and_cross_entropy_match_finite_differences():
    """conv2d with padding, max pooling, flatten, reshape, log_softmax and cross_entropy: a small CNN's ops."""
    target = np.array([1, 0], dtype=np.int64)

    def loss(x, w, b, fc):
        y = coppice.max_pool2d(coppice.relu(coppice.conv2d(x, w, b, padding=1)), 2)
        logits = coppice.matmul(coppice.flatten(y, 1), fc)
        log_p = coppice.log_softmax(logits.reshape(2, 3), dim=1)
        return coppice.cross_entropy(logits, target) - coppice.sum(log_p) * 0.01

    check_gradients(loss, [f64(2, 1, 4, 4), f64(2, 1, 3, 3), f64(2), f64(8, 3)])


def test_sparse_weight_gradient_is_on_its_pattern():
    """A CSR weight's gradient comes back in CSR on the weight's pattern, and equals the dense gradient there."""
    w = f64(6, 4)
    mask = RNG.random((6, 4)) < 0.4
    x = f64(3, 4)
    ws = coppice.Variable(coppice.sparse_from_mask(w, mask, "csr"), requires_grad=True)
    wd = coppice.Variable(np.where(mask, w, 0), requires_grad=True)
    coppice.sum(coppice.linear(x, ws) ** 2).backward()
    coppice.sum(coppice.linear(x, wd) ** 2).backward()
    assert ws.grad.format == "csr" and ws.grad.nnz == int(mask.sum())
    np.testing.assert_allclose(ws.grad.to_dense().numpy(), np.where(mask, wd.grad.numpy(), 0), rtol=1e-12)


def test_the_library_gradcheck_takes_python_functions():
    x, w = (coppice.Variable(f64(3, 4), requires_grad=True), coppice.Variable(f64(4, 2), requires_grad=True))
    r = coppice.gradcheck(lambda a, b: coppice.tanh(coppice.matmul(a, b)), [x, w])
    assert r["passed"], r["message"]


def test_no_grad_records_nothing():
    x = coppice.Variable(f64(3), requires_grad=True)
    assert coppice.is_grad_enabled()
    with coppice.no_grad():
        assert not coppice.is_grad_enabled()
        y = coppice.sum(x * 2.0)
        with coppice.no_grad():
            pass
        assert not coppice.is_grad_enabled()  # nested guards restore what they found
    assert coppice.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    with pytest.raises(coppice.Error):
        y.backward()  # nothing to differentiate
    assert x.grad is None
    z = coppice.sum(x * 2.0)
    assert z.requires_grad and z.grad_fn is not None
    with pytest.raises(KeyError):
        with coppice.no_grad():
            raise KeyError("leaves the block")
    assert coppice.is_grad_enabled()  # an exception leaves grad mode as it was


def test_operators_numbers_arrays_and_tensors():
    a = np.array([1.0, 2.0, 3.0])
    x = coppice.Variable(a, requires_grad=True)
    y = 2.0 - x * 3 + a / 2 + (1 / (x + 1)) ** 2
    assert isinstance(y, coppice.Variable)
    np.testing.assert_allclose(y.numpy(), 2 - 3 * a + a / 2 + (1 / (a + 1)) ** 2)
    z = a + x  # NumPy defers to Variable.__radd__
    assert isinstance(z, coppice.Variable) and z.requires_grad
    coppice.sum(y).backward()
    np.testing.assert_allclose(x.grad.numpy(), -3 - 2 / (a + 1) ** 3)
    x.grad = None
    assert x.grad is None
    # Only arrays and Tensors in: the op on Tensors, a Tensor out.
    t = coppice.relu(np.array([-1.0, 2.0]))
    assert isinstance(t, coppice.Tensor)
    np.testing.assert_array_equal(t.numpy(), [0.0, 2.0])
    assert isinstance(coppice.matmul(np.eye(2), np.ones((2, 2))), coppice.Tensor)
    # detach shares the value, cut off from the graph.
    d = y.detach()
    assert d.is_leaf and not d.requires_grad and d.data.data_ptr() == y.data.data_ptr()


def test_bad_input_raises_coppice_error_naming_it():
    x = coppice.Variable(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(coppice.Error, match=r"matmul: inner dimensions differ: a is \[2, 3\], b is \[4, 5\]"):
        coppice.matmul(x, np.ones((4, 5), np.float32))
    with pytest.raises(coppice.Error, match="cross_entropy: target must be i64, got f32"):
        coppice.cross_entropy(x, np.zeros(2, np.float32))
    with pytest.raises(coppice.Error, match="only floating-point values can require grad.*i64"):
        coppice.Variable(np.ones(3, np.int64), requires_grad=True)
    with pytest.raises(coppice.Error, match="conv2d"):
        coppice.conv2d(np.ones((1, 2, 5, 5), np.float32), coppice.Variable(np.ones((4, 3, 3, 3), np.float32)))
    with pytest.raises(coppice.Error, match="reshape"):
        x.reshape(4, 2)
    with pytest.raises(coppice.Error, match="reduction must be mean, sum or none, got 'avg'"):
        coppice.cross_entropy(x, np.zeros(2, np.int64), reduction="avg")
    with pytest.raises(coppice.Error, match="Variable.to: unknown dtype 'f17'"):
        x.to("f17")
