"""coppice.torch: sparse linear functions and SparseLinear on torch tensors, sparsify_, state_dict.

Every test takes `device`: the CPU always, and CUDA where PyTorch sees a GPU (the lent GPU machine runs this file
as a script through tools/device/run_python_cuda.sh: its Python has no pytest, so __main__ below runs each test
on "cuda"). Skipped, saying why, where PyTorch is not installed.
"""
import io
import re
import sys
import warnings

try:
    import pytest
except ImportError:  # the GPU machine's Python: __main__ runs the tests
    pytest = None

try:
    import torch
except ImportError as e:  # pragma: no cover
    torch = None
    if pytest is not None:
        pytest.skip(f"PyTorch is not installed ({e})", allow_module_level=True)

import coppice

if torch is not None:
    import coppice.torch as ct
    from coppice.torch.functional import sparse_linear

FORMATS = ["bsr", "csr", "csc", "coo", "nm"]
DEVICES = ["cpu"] + (["cuda"] if torch is not None and torch.cuda.is_available() else [])


def _parametrize(name, values):
    return pytest.mark.parametrize(name, values) if pytest is not None else (lambda f: f)


def _raises(exc, match):
    if pytest is not None:
        return pytest.raises(exc, match=match)
    return _Raises(exc, match)


class _Raises:
    def __init__(self, exc, match):
        self.exc, self.match = exc, match

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        assert kind is not None and issubclass(kind, self.exc), f"expected {self.exc.__name__}, got {kind}"
        assert re.search(self.match, str(value)), f"{value!r} does not match {self.match!r}"
        return True


def _layer(fmt, device, in_features=64, out_features=32, density=0.25, dtype=torch.float32 if torch else None):
    torch.manual_seed(0)
    dense = torch.nn.Linear(in_features, out_features, device=device, dtype=dtype)
    return dense, ct.SparseLinear.from_dense(dense, fmt, density=density, block=16)


@_parametrize("device", DEVICES)
@_parametrize("fmt", FORMATS)
def test_forward_and_gradients_match_torch_dense(device, fmt):
    _, layer = _layer(fmt, device)
    w = layer.dense_weight().requires_grad_()
    x = torch.randn(5, 3, 64, device=device, requires_grad=True)
    y = layer(x)
    ref = torch.nn.functional.linear(x, w, layer.bias)
    torch.testing.assert_close(y, ref, rtol=2e-4, atol=2e-4)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    dx = x.grad.clone()
    x.grad = None
    (ref * g).sum().backward()
    torch.testing.assert_close(dx, x.grad, rtol=2e-4, atol=2e-4)
    # The values' gradient is compact: the dense gradient read at the stored positions.
    assert layer.values.grad.shape == layer.values.shape
    stored = ct.SparseLinear.from_dense(torch.nn.Linear(64, 32, device=device), fmt, density=0.25, block=16)
    stored.set_pattern(coppice.kernels.with_values(layer.pattern(), ct.functional.to_coppice(layer.values.grad)))
    mask = layer.dense_weight() != 0
    torch.testing.assert_close(stored.dense_weight()[mask], w.grad[mask], rtol=2e-4, atol=2e-4)


@_parametrize("fmt", FORMATS)
def test_gradcheck_float64(fmt):
    torch.manual_seed(1)
    layer = ct.SparseLinear.from_dense(torch.nn.Linear(8, 6).double(), fmt, density=0.5, block=2)
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    values = layer.values.detach().clone().requires_grad_()
    bias = layer.bias.detach().clone().requires_grad_()
    pattern = layer.pattern()
    assert torch.autograd.gradcheck(lambda x, v, b: sparse_linear(x, v, pattern, b), (x, values, bias))


@_parametrize("device", DEVICES)
def test_tensors_cross_without_copies(device):
    _, layer = _layer("bsr", device)
    x = torch.randn(4, 64, device=device)
    seen = {}
    real = coppice.kernels.sparse_linear_forward

    def spy(x_capsule, values_capsule, pattern, bias, dtype, capture_stream):  # DLPack capsules in and out
        xc, vc = coppice.from_dlpack(x_capsule), coppice.from_dlpack(values_capsule)
        seen["x"], seen["values"] = xc.data_ptr(), vc.data_ptr()
        y, x_used, values_used = real(xc, vc, pattern, bias, dtype, capture_stream)
        yc = coppice.from_dlpack(y)
        seen["y"], seen["copied"] = yc.data_ptr(), (x_used, values_used)
        return yc.__dlpack__(), x_used, values_used

    coppice.kernels.sparse_linear_forward = spy
    try:
        y = layer(x)
    finally:
        coppice.kernels.sparse_linear_forward = real
    assert seen == {"x": x.data_ptr(), "values": layer.values.data_ptr(), "y": y.data_ptr(), "copied": (None, None)}


@_parametrize("device", DEVICES)
def test_state_dict_round_trips_through_torch_save(device):
    for fmt in FORMATS:
        _, layer = _layer(fmt, device)
        buffer = io.BytesIO()
        torch.save(layer.state_dict(), buffer)
        buffer.seek(0)
        other = ct.SparseLinear.from_dense(torch.nn.Linear(64, 32, device=device), fmt, density=0.25, block=16,
                                           criterion="random")
        other.load_state_dict(torch.load(buffer))
        x = torch.randn(7, 64, device=device)
        assert torch.equal(other(x), layer(x)), fmt
        assert torch.equal(other.dense_weight(), layer.dense_weight()), fmt


def test_copies_are_layers_of_their_own_and_whole_modules_pickle():
    import copy
    _, layer = _layer("bsr", "cpu")
    x = torch.randn(3, 64)
    y = layer(x)
    twin = copy.deepcopy(layer)
    _, other = _layer("bsr", "cpu", density=0.5)
    twin.set_pattern(other.sparse_weight())
    assert torch.equal(layer(x), y) and torch.equal(twin(x), other(x)) and twin._key != layer._key
    buffer = io.BytesIO()
    torch.save(layer, buffer)  # the whole module, not its state_dict
    buffer.seek(0)
    loaded = torch.load(buffer) if not hasattr(torch.serialization, "add_safe_globals") else \
        torch.load(buffer, weights_only=False)
    assert torch.equal(loaded(x), y)


def test_load_adopts_another_number_of_stored_entries_and_keeps_the_parameter():
    _, layer = _layer("csr", "cpu", density=0.5)
    _, smaller = _layer("csr", "cpu", density=0.1)
    values = smaller.values
    smaller.load_state_dict(layer.state_dict())
    assert smaller.values is values and smaller.nnz == layer.nnz
    assert torch.equal(smaller.dense_weight(), layer.dense_weight())


def test_load_refuses_another_format_or_shape_and_a_broken_pattern():
    _, bsr = _layer("bsr", "cpu")
    _, csr = _layer("csr", "cpu")
    with _raises(RuntimeError, "checkpoint holds a csr weight"):
        bsr.load_state_dict(csr.state_dict())
    state = csr.state_dict()
    state["col_indices"] = state["col_indices"].flip(0)  # columns out of order within rows
    with _raises(RuntimeError, "not a valid csr weight"):
        csr.load_state_dict(state)


@_parametrize("device", DEVICES)
def test_to_dense_is_from_dense_inverted(device):
    dense, layer = _layer("bsr", device)
    back = layer.to_dense()
    assert isinstance(back, torch.nn.Linear)
    mask = back.weight != 0
    assert 0 < mask.sum().item() <= 0.25 * dense.weight.numel()
    assert torch.equal(back.weight[mask], dense.weight[mask])
    assert torch.equal(back.bias, dense.bias)
    # Kept blocks are the largest by their sum of squares.
    blocks = dense.weight.detach().pow(2).reshape(2, 16, 4, 16).sum((1, 3)).flatten()
    kept = mask.reshape(2, 16, 4, 16).any(3).any(1).flatten()
    assert blocks[kept].min() >= blocks[~kept].max()


@_parametrize("device", DEVICES)
def test_autocast_runs_the_product_in_bfloat16_with_float32_gradients(device):
    _, layer = _layer("bsr", device)
    x = torch.randn(8, 64, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.values.grad.dtype == torch.float32
    ref = torch.nn.functional.linear(x, layer.dense_weight(), layer.bias)
    torch.testing.assert_close(y.float(), ref, rtol=3e-2, atol=3e-2)


@_parametrize("device", DEVICES)
def test_a_torch_optimizer_trains_the_compact_values(device):
    torch.manual_seed(2)
    teacher = torch.nn.Linear(32, 8, device=device)
    layer = ct.SparseLinear(32, 8, format="csr", density=0.5, device=device)
    opt = torch.optim.Adam(layer.parameters(), lr=0.02)
    x = torch.randn(256, 32, device=device)
    target = teacher(x).detach()
    losses = []
    for _ in range(150):
        loss = torch.nn.functional.mse_loss(layer(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], (losses[0], losses[-1])
    assert opt.state[layer.values]["exp_avg"].shape == layer.values.shape == (128,)


@_parametrize("device", DEVICES)
def test_rigl_updates_layers_on_their_device(device):
    """MaskUpdater on each format's layers where they live (the CPU, or CUDA: the selection runs there too)."""
    for fmt in ("bsr", "csr", "nm"):
        torch.manual_seed(4)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).to(device)
        ct.sparsify_(model, [{"regex": "[02]", "format": fmt, "block": 16, "density": 0.25}], criterion="random")
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        updater = ct.MaskUpdater(model, opt, method="rigl", end_step=10, interval=2, drop_fraction=0.5)
        values, nnz = model[0].values, model[0].nnz
        x, y = torch.randn(32, 64, device=device), torch.randint(0, 16, (32,), device=device)
        patterns = set()
        for step in range(6):
            updater.begin_step(step)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            updater.step(step)
            patterns.add(tuple(model[0].dense_weight().ne(0).flatten().tolist()))
        assert model[0].values is values and model[0].nnz == nnz, fmt
        assert model[0].values.device.type == device and opt.state[values]["exp_avg"].shape == values.shape
        assert len(patterns) > 1, f"{fmt}: the pattern never changed"
        assert torch.isfinite(loss), fmt


@_parametrize("device", DEVICES)
def test_torch_compile_runs_the_layer_as_an_opaque_op(device):
    """Where PyTorch has torch.library.custom_op (2.4+): a compiled model agrees with the eager one, gradients
    included, and a pattern changed between compiled steps is used by the next one."""
    if not ct.functional.OPS:
        if pytest is not None:
            pytest.skip(f"PyTorch {torch.__version__} has no torch.library.custom_op")
        return
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).to(device)
    ct.sparsify_(model, [{"regex": "[02]", "format": "bsr", "block": 16, "density": 0.5}])
    compiled = torch.compile(model)
    x = torch.randn(32, 64, device=device)
    for m in (model, compiled):
        m.zero_grad()
        out = m(x)
        out.pow(2).sum().backward()
        if m is model:
            ref, ref_grad = out.detach(), model[0].values.grad.clone()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model[0].values.grad, ref_grad, rtol=1e-4, atol=1e-4)
    # A new pattern (a mask update's way: set_pattern) reaches the compiled op without recompiling.
    other = ct.SparseLinear.from_dense(torch.nn.Linear(64, 64, device=device), "bsr", density=0.25, block=16)
    model[0].set_pattern(other.sparse_weight())
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def _skip(why):
    if pytest is not None:
        pytest.skip(why)


def _graph_case(fmt, seed):
    """A SparseLinear on the GPU with an input, its eager output and values gradient for that input (the
    reference a captured graph must reproduce bit for bit: the same kernels on the same operands)."""
    _, layer = _layer(fmt, "cuda")
    torch.manual_seed(seed)
    x = torch.randn(48, 64, device="cuda")
    values = layer.values.detach().clone().requires_grad_()
    y = sparse_linear(x, values, layer.pattern(), layer.bias.detach())
    y.pow(2).sum().backward()
    return layer, x, y.detach(), values.grad


@_parametrize("device", DEVICES)
@_parametrize("fmt", FORMATS)
def test_a_cuda_graph_captures_and_replays_the_layer(device, fmt):
    """torch.cuda.graph over a SparseLinear's forward and backward: Coppice records its kernels into PyTorch's
    capture, and each replay recomputes the output and the compact gradient from the static input's new values."""
    if device != "cuda":
        return _skip("CUDA graphs need a GPU")
    layer, x0, _, _ = _graph_case(fmt, seed=0)
    static_x = x0.clone()
    side = torch.cuda.Stream()  # warm-up on a side stream, as PyTorch's documentation does
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            layer.zero_grad(set_to_none=True)
            layer(static_x).pow(2).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    layer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
        static_y.pow(2).sum().backward()
    for seed in (1, 2, 3):
        _, x, y_ref, grad_ref = _graph_case(fmt, seed)
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_y, y_ref, rtol=0, atol=0, msg=lambda m: f"{fmt} y: {m}")
        torch.testing.assert_close(layer.values.grad, grad_ref, rtol=0, atol=0, msg=lambda m: f"{fmt} grad: {m}")
    del graph  # its memory (Coppice's pool among it) goes back; the layer still runs eagerly
    torch.testing.assert_close(layer(static_x), y_ref, rtol=0, atol=0)
    # A mask update after a capture says that graphs keep the pattern they captured.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer.set_pattern(layer.sparse_weight())
    assert any("CUDA graph" in str(w.message) for w in caught), [str(w.message) for w in caught]


@_parametrize("device", DEVICES)
def test_torch_compile_reduce_overhead_replays_the_layer_in_cuda_graphs(device):
    """torch.compile(mode="reduce-overhead") captures the compiled forward and backward, Coppice's opaque ops
    included, in CUDA graphs: steps with new inputs agree with the eager model, gradients included."""
    if device != "cuda":
        return _skip("CUDA graphs need a GPU")
    if not ct.functional.OPS:
        return _skip(f"PyTorch {torch.__version__} has no torch.library.custom_op")
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)).to(device)
    ct.sparsify_(model, [{"regex": "[02]", "format": "bsr", "block": 16, "density": 0.5}])
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(4):  # cudagraph trees warm up first, then record, then replay
        x = torch.randn(32, 64, device=device)
        outs, grads = [], []
        for m in (model, compiled):
            model.zero_grad(set_to_none=True)
            out = m(x)
            out.pow(2).sum().backward()
            outs.append(out.detach().clone())
            grads.append(model[0].values.grad.clone())
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4, msg=lambda m: f"step {step}: {m}")
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4, msg=lambda m: f"step {step}: {m}")


@_parametrize("device", DEVICES)
def test_sr_ste_projects_forward_and_passes_the_dense_gradient_straight_through(device):
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16)).to(device)
    ct.sparsify_(model, [{"name": "0", "format": "nm", "sr_ste": {"decay": 0.1, "interval": 2}}])
    layer = model[0]
    assert isinstance(layer, ct.SrSteLinear) and layer.weight.shape == (16, 32)
    assert torch.equal(layer.mask.view(16, 8, 4).sum(-1), torch.full((16, 8), 2, device=device))
    x = torch.randn(8, 32, device=device, requires_grad=True)
    projected = (layer.weight * layer.mask).detach()
    y = layer(x)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, projected, layer.bias), rtol=2e-4, atol=2e-4)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    torch.testing.assert_close(x.grad, g @ projected, rtol=2e-4, atol=2e-4)
    expected = g.t() @ x.detach() + 0.1 * layer.weight.detach() * ~layer.mask
    torch.testing.assert_close(layer.weight.grad, expected, rtol=2e-4, atol=2e-4)
    # The mask follows the weight every `interval` training forwards.
    with torch.no_grad():
        layer.weight.neg_().add_(torch.randn_like(layer.weight))
    layer(x)  # the second forward: interval 2 keeps the mask
    kept = layer.mask.clone()
    layer(x)  # the third recomputes it
    assert torch.equal(layer.mask, coppice_mask(layer.weight)) and not torch.equal(layer.mask, kept)


def coppice_mask(weight):
    return ct.functional.to_torch(coppice.nm_mask(ct.functional.to_coppice(weight.detach().float().cpu()), 2, 4)).to(
        weight.device)


def test_sr_ste_resumes_bit_identically_between_mask_recomputations():
    # interval 3: the checkpoint (after 4 training forwards) falls between two recomputations, which only the
    # saved forward count places on the same steps again.
    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
        ct.sparsify_(model, [{"name": "0", "format": "nm", "sr_ste": {"decay": 0.05, "interval": 3}}])
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train(model, opt, steps):
        for step in steps:
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(8, 32, generator=g), torch.randint(0, 8, (8,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    model, opt = build()
    train(model, opt, range(4))
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    train(model, opt, range(4, 9))
    buffer.seek(0)
    saved = torch.load(buffer)
    other, other_opt = build()
    other.load_state_dict(saved["model"])
    other_opt.load_state_dict(saved["opt"])
    assert other[0]._forwards == 4
    train(other, other_opt, range(4, 9))
    for a, b in zip(model.state_dict().values(), other.state_dict().values()):
        assert a == b if isinstance(a, dict) else torch.equal(a, b)
    with _raises(RuntimeError, "not an SrSteLinear's"):
        other[0].set_extra_state({"forwards": -1})


def test_sr_ste_gradcheck_of_x_in_float64():
    """x's gradient is the true one (W's is straight-through by design, checked entry by entry above)."""
    torch.manual_seed(7)
    layer = ct.SrSteLinear(8, 4, decay=0.0).double()
    layer.refresh_mask()
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x), (x,))


def test_errors_name_what_is_wrong():
    _, layer = _layer("bsr", "cpu")
    with _raises(ValueError, "does not end in the weight's 64 input features"):
        layer(torch.randn(3, 63))
    with _raises(TypeError, "x is torch.float64, values torch.float32"):
        layer(torch.randn(3, 64, dtype=torch.float64))
    with _raises(TypeError, "pattern must be a sparse coppice.Tensor"):
        sparse_linear(torch.randn(3, 64), layer.values, torch.zeros(32, 64))
    with _raises(ValueError, "format must be one of"):
        ct.SparseLinear(8, 8, format="dense")
    with _raises(ValueError, "not a whole number of 16x16 blocks"):
        ct.SparseLinear(24, 16, format="bsr", block=16)
    with _raises(TypeError, "expected an nn.Linear"):
        ct.SparseLinear.from_dense(torch.nn.Conv2d(1, 1, 1))
    with _raises(ValueError, "sr_ste, which trains n:m weights: its format must be nm"):
        ct.sparsify_(torch.nn.Sequential(torch.nn.Linear(8, 8)), [{"name": "0", "format": "csr", "sr_ste": True}])
    with _raises(ValueError, "decay must be finite and >= 0"):
        ct.SrSteLinear(8, 8, decay=-1.0)


def test_one_call_kernels_cast_and_check_their_operands():
    # coppice.kernels.sparse_linear_forward/_backward, what the autograd function calls: casts inside, capsules
    # (or DLPack producers) in, capsules out, and errors that name the argument.
    from torch.utils import dlpack
    _, layer = _layer("bsr", "cpu")
    x = torch.randn(3, 64)
    pattern = layer.pattern()
    y, x_used, values_used = coppice.kernels.sparse_linear_forward(x, layer.values.detach(), pattern,
                                                                   layer.bias.detach(), "f64")
    y, x_used, values_used = (dlpack.from_dlpack(c) for c in (y, x_used, values_used))
    assert (y.dtype, x_used.dtype, values_used.dtype) == (torch.float64,) * 3
    assert torch.allclose(y, (x.double() @ layer.dense_weight().double().t() + layer.bias.double()).detach())
    dy = torch.randn(3, 32)
    dx, dvalues, dbias = coppice.kernels.sparse_linear_backward(dy, x_used, values_used, pattern, True, True, True,
                                                                "f32", "f32", None)
    dx, dvalues, dbias = (dlpack.from_dlpack(c) for c in (dx, dvalues, dbias))
    assert (dx.dtype, dvalues.dtype, dbias.dtype) == (torch.float32, torch.float32, torch.float64)
    assert torch.allclose(dbias, dy.double().sum(0))
    assert torch.allclose(dx, dy @ layer.dense_weight(), atol=1e-5)
    none = coppice.kernels.sparse_linear_backward(dy, x, layer.values.detach(), pattern, False, False, False)
    assert none == (None, None, None)
    with _raises(coppice.Error, "dtype must be a dtype name such as 'bf16' or None, got 'float'"):
        coppice.kernels.sparse_linear_forward(x, layer.values.detach(), pattern, None, "float")
    with _raises(coppice.Error, "x is f64, values f32 .give a dtype"):
        coppice.kernels.sparse_linear_forward(x.double(), layer.values.detach(), pattern)
    with _raises(coppice.Error, "pattern must be sparse"):
        coppice.kernels.sparse_linear_forward(x, layer.values.detach(), coppice.from_dlpack(torch.zeros(32, 64)))
    with _raises(coppice.Error, "bias must be dense of shape \\[32\\]"):
        coppice.kernels.sparse_linear_forward(x, layer.values.detach(), pattern, torch.zeros(31))
    with _raises(coppice.Error, "dy must be dense of shape \\[3, 32\\]"):
        coppice.kernels.sparse_linear_backward(torch.zeros(3, 31), x, layer.values.detach(), pattern, True, True, True)
    with _raises(coppice.Error, "sparse_linear_backward: dx_dtype must be a dtype name"):
        coppice.kernels.sparse_linear_backward(dy, x, layer.values.detach(), pattern, True, True, True, 3)


def _toy_cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


class _Mlp(torch.nn.Module if torch is not None else object):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def test_sparsify_replaces_selected_linears_in_place():
    torch.manual_seed(3)
    model = _Mlp()
    x = torch.randn(4, 64)
    fc3 = model.fc3
    out = ct.sparsify_(model, [{"regex": r"fc[12]", "format": "bsr", "block": 16}], density=0.25,
                       distribution="erk")
    assert out is model and model.fc3 is fc3
    assert isinstance(model.fc1, ct.SparseLinear) and isinstance(model.fc2, ct.SparseLinear)
    kept = model.fc1.nnz + model.fc2.nnz
    assert abs(kept - 0.25 * (64 * 256 + 256 * 256)) <= 256  # one 16x16 block of rounding
    # ERK gives the smaller layer the larger density, as the trainer's sparsity.distribution does.
    assert model.fc1.density > model.fc2.density
    expected = dict(coppice.layer_densities([("fc1", [256, 64]), ("fc2", [256, 256])], 0.25, "erk"))
    assert abs(model.fc2.density - expected["fc2"]) < 1 / 256
    model(x).sum().backward()
    assert model.fc1.values.grad is not None


def test_sparsify_a_toy_cnn_by_name_and_own_densities():
    model = _toy_cnn()
    ct.sparsify_(model, [{"name": "3", "format": "csr", "density": 0.1}, {"name": "5", "format": "nm"}])
    assert isinstance(model[3], ct.SparseLinear) and isinstance(model[5], ct.SparseLinear)
    assert abs(model[3].density - 0.1) < 1e-3 and model[5].density == 0.5 and model[5].format == "nm"
    model(torch.randn(2, 1, 8, 8)).sum().backward()


def test_sparsify_rules_are_checked():
    with _raises(ValueError, "rule 0 .* selects no module"):
        ct.sparsify_(_Mlp(), [{"name": "fc9"}], density=0.1)
    with _raises(TypeError, "rule 0 selects '0', a Conv2d"):
        ct.sparsify_(_toy_cnn(), [{"name": "0"}], density=0.1)
    with _raises(ValueError, "unknown keys \\['sparsity'\\]"):
        ct.sparsify_(_Mlp(), [{"name": "fc1", "sparsity": 0.9}])
    with _raises(ValueError, "exactly one of 'name' and 'regex'"):
        ct.sparsify_(_Mlp(), [{"format": "csr"}])
    with _raises(ValueError, "has no density of its own"):
        ct.sparsify_(_Mlp(), [{"name": "fc1"}])
    with _raises(ValueError, "does not compile"):
        ct.sparsify_(_Mlp(), [{"regex": "fc("}], density=0.1)


if __name__ == "__main__":
    if torch is None:
        print("skipped: PyTorch is not installed")
        sys.exit(0)
    # The GPU machine: every test, on CUDA where it takes a device.
    import inspect
    passed = failed = skipped = 0
    for name, fn in sorted((n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)):
        params = inspect.signature(fn).parameters
        cases = [{}]
        if "device" in params:
            cases = [dict(c, device=d) for c in cases for d in DEVICES]
        if "fmt" in params:
            cases = [dict(c, fmt=f) for c in cases for f in FORMATS]
        for case in cases:
            try:
                fn(**case)
                passed += 1
            except Exception as e:  # noqa: BLE001 - report every failure and go on
                failed += 1
                print(f"FAILED {name}{case}: {type(e).__name__}: {e}")
            except BaseException as e:  # pytest.skip's Skipped, where pytest is installed
                if type(e).__name__ != "Skipped":
                    raise
                skipped += 1
    print(f"coppice.torch: {passed} passed, {failed} failed, {skipped} skipped (torch {torch.__version__}, "
          f"devices {DEVICES})")
    sys.exit(1 if failed else 0)
