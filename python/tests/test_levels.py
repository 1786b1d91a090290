"""coppice.levels (python/bind_levels.cc): formats declared by their levels from Python. Declarations as text, parts
from dense values and a mask, their dense form, the built-in formats' parts read as their declarations' and back,
and the errors, by name."""
import json
import os

import numpy as np
import pytest

import coppice
from coppice import levels
from conftest import REPO


def masked_input(seed, shape=(8, 16), keep=0.3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < keep
    mask[1] = False  # an empty row
    return x, mask


def test_declarations_are_text_written_in_full():
    assert levels.describe("(dense, compressed)") == "(dense(0), compressed(1))"
    assert levels.builtin("csr") == "(dense(0), compressed(1))"
    assert levels.builtin("bsr", block_rows=2, block_cols=4) == "blocked 2x4 (dense(0), compressed(1), dense(2), dense(3))"
    assert levels.builtin("nm", n=2, m=4) == "(dense(0), n_out_of_m(1, 2:4, u8))"
    assert levels.builtin("coo", rank=3) == "(compressed(0, non-unique), singleton(1), singleton(2)) index i64"


@pytest.mark.parametrize("declaration", [
    "(dense, ranged)",                                                      # ELLPACK
    "(compressed, compressed)",                                             # doubly compressed
    "blocked 2x4 (dense, compressed, compressed(non-unique), singleton)",  # BSR outside, COO inside
    "blocked 4x4 (dense, ranged, dense, compressed)",                      # blocked ELL outside, CSR inside
])
def test_user_and_hybrid_formats_round_trip_through_dense(declaration):
    x, mask = masked_input(3)
    parts = levels.from_mask(x, mask, declaration)
    assert "values" in parts and all(isinstance(p, coppice.Tensor) for p in parts.values())
    dense = np.asarray(levels.to_dense(parts, declaration, list(x.shape)))
    np.testing.assert_array_equal(dense, np.where(mask, x, 0))


def test_conversion_walks_the_stored_entries_into_another_format():
    x, mask = masked_input(9)
    ell = levels.from_mask(x, mask, "(dense, ranged)")
    hybrid = "blocked 2x4 (dense, compressed, compressed(non-unique), singleton)"
    converted = levels.convert(ell, "(dense, ranged)", list(x.shape), hybrid)
    expected = levels.from_mask(x, mask, hybrid)
    assert set(converted) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(np.asarray(converted[name]), np.asarray(expected[name]))


def test_a_built_in_tensor_is_its_declaration_part_for_part_and_back():
    x, mask = masked_input(5)
    for fmt, opts in (("csr", {}), ("bsr", {"block_rows": 2, "block_cols": 4}), ("coo", {})):
        t = coppice.sparse_from_mask(x, mask, fmt, **opts)
        declaration, parts = levels.of_builtin(t)
        ours = levels.from_mask(x, mask, declaration)
        assert set(parts) == set(ours)
        for name in parts:
            np.testing.assert_array_equal(np.asarray(parts[name]), np.asarray(ours[name]))
        back = levels.to_builtin(parts, declaration, list(x.shape), fmt)
        assert back.format == fmt
        for name, part in t.parts().items():
            np.testing.assert_array_equal(np.asarray(back.parts()[name]), np.asarray(part))


def test_errors_name_the_level_and_the_part():
    x, mask = masked_input(7)
    with pytest.raises(coppice.Error, match="level 1 'sparse': unknown level type 'sparse'"):
        levels.describe("(dense, sparse)")
    with pytest.raises(coppice.Error, match="group 0 .* stores 4 entries, more than n = 2"):
        levels.from_mask(np.ones((2, 8), np.float32), np.ones((2, 8), bool), "(dense, n_out_of_m(2:4))")
    parts = levels.from_mask(x, mask, "(dense, compressed)")
    with pytest.raises(coppice.Error, match="no part 'crow_indices' in a tensor of 2 levels"):
        levels.to_dense({**parts, "crow_indices": parts["positions_1"]}, "(dense, compressed)", [8, 16])
    broken = dict(parts, coordinates_1=np.full(np.asarray(parts["coordinates_1"]).shape, 99, np.int32))
    with pytest.raises(coppice.Error, match=r"level 1 \(compressed\(1\)\): coordinate 0 is 99, outside \[0, 16\)"):
        levels.to_dense(broken, "(dense, compressed)", [8, 16])
    with pytest.raises(coppice.Error, match="is not the csr format"):
        levels.to_builtin(levels.from_mask(x, mask, "(dense, ranged)"), "(dense, ranged)", [8, 16], "csr")


# ---- declared formats in the format table (levels.register) -----------------------------------------------------

HYBRID = "blocked 4x4 (dense, compressed, compressed(non-unique), singleton)"  # BSR outside, COO inside


def test_a_registered_format_is_a_format_like_the_built_in_ones():
    assert levels.register("py_ellpack", "(dense, ranged)") == "(dense(0), ranged(1))"
    assert levels.register("py_ellpack", "(dense(0), ranged(1))") == "(dense(0), ranged(1))"  # again: nothing
    assert levels.registered("py_ellpack") == "(dense(0), ranged(1))"
    assert levels.registered("csr") is None
    assert "py_ellpack" in levels.names()
    x, mask = masked_input(7)
    t = coppice.sparse_from_mask(x, mask, "py_ellpack")
    assert t.format == "py_ellpack"
    np.testing.assert_array_equal(t.to_dense().numpy(), np.where(mask, x, 0))
    np.testing.assert_array_equal(t.to_format("csr").to_dense().numpy(), np.where(mask, x, 0))
    b = np.random.default_rng(2).standard_normal((16, 5)).astype(np.float32)
    np.testing.assert_allclose(coppice.matmul(t, b).numpy(), np.where(mask, x, 0) @ b, rtol=1e-5, atol=1e-5)


def test_registration_errors_name_the_format():
    with pytest.raises(coppice.Error, match="format 'py_ellpack' is already declared as"):
        levels.register("py_ellpack", "(dense, compressed)")
    with pytest.raises(coppice.Error, match="format 'bsr' is already registered"):
        levels.register("bsr", "(dense, compressed)")
    with pytest.raises(coppice.Error, match="level 1 \\(singleton\\(1\\)\\): a singleton must follow"):
        levels.register("py_lonely", "(dense, singleton)")
    assert levels.registered("py_lonely") is None


def test_a_hybrid_format_trains_with_rigl_and_keeps_its_format():
    """BSR outside, COO inside each 4x4 block: RigL drops and grows single entries (the blocks are not dense inside),
    the weights keep the format through every update, and the loss falls."""
    from coppice import nn, optim
    levels.register("py_bsr_of_coo", HYBRID)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((256, 16)).astype(np.float32)
    Y = (X[:, 0] * X[:, 1] > 0).astype(np.int64)
    coppice.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    w = model.parameter("0.weight").numpy().copy()
    model.set_parameter("0.weight", coppice.Variable(
        coppice.sparse_from_mask(w, rng.random(w.shape) < 0.3, "py_bsr_of_coo"), requires_grad=True, name="0.weight"))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    updater = optim.MaskUpdater(model, opt, growth="gradient", end_step=30, interval=5, drop_fraction=0.3)
    before = model.parameter("0.weight").data
    first_pattern = before.to_dense().numpy() != 0
    losses, updates = [], 0
    for step in range(40):
        i = step * 32 % len(X)
        updater.begin_step(step)
        loss = coppice.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
        opt.zero_grad()
        loss.backward()
        updater.after_backward()
        opt.step()
        losses.append(loss.item())
        updates += updater.update(step) is not None
    after = model.parameter("0.weight").data
    assert updates == 6 and after.format == "py_bsr_of_coo"
    assert after.nnz == before.nnz
    assert (after.to_dense().numpy() != 0).tolist() != first_pattern.tolist()
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def lenet_job(fmt, **extra):
    """LeNet-300-100 on 784-feature blobs, fc1 and fc2 at 10 % in `fmt` (declared below), trained with RigL."""
    job = {"name": "levels_lenet", "device": "cpu", "seed": 2,
           "model": {"name": "mlp", "options": {"sizes": [784, 300, 100, 10]}},
           "data": {"dataset": "synthetic", "batch_size": 64,
                    "synthetic": {"examples": 4096, "test_examples": 512, "features": 784, "classes": 10}},
           "sparsity": {"formats": {"lenet_bsr_of_coo": {"block": [4, 4], "levels": ["dense", "compressed",
                                                                             "compressed(non-unique)", "singleton"]},
                                    "lenet_ellpack": {"levels": ["dense", "ranged"]}},
                        "density": 0.1, "distribution": "uniform",
                        "rules": [{"regex": "fc[12]\\.weight", "format": fmt}]},
           "mask_update": {"method": "rigl", "end_step": 60, "interval": 20, "drop_fraction": 0.3},
           "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "training": {"steps": 80}}
    job.update(extra)
    return job


@pytest.mark.parametrize("fmt", ["lenet_bsr_of_coo", "lenet_ellpack"])
def test_lenet_in_a_declared_format_trains_with_rigl_resumes_and_reads_in_pytorch(fmt, tmp_path):
    """A hybrid (BSR outside, COO inside) and an ELLPACK declared in the job: LeNet-300-100 trains with RigL from
    Python, a run stopped at step 40 resumes to the same losses bit for bit, and tools/device/read_checkpoint_torch.py
    rebuilds the checkpoint's weights in PyTorch from their level parts, equal to what coppice.load reads."""
    full = []
    coppice.train(lenet_job(fmt), callback=lambda step, loss: full.append(loss))
    assert len(full) == 80 and np.mean(full[-10:]) < np.mean(full[:10])
    ckpt = tmp_path / "ckpt"
    job = lenet_job(fmt, checkpoint={"dir": str(ckpt), "every_steps": 40})
    coppice.train(job, max_steps=40)
    resumed = []
    coppice.train(job, resume=str(ckpt), callback=lambda step, loss: resumed.append(loss))
    assert resumed == full[40:]
    torch = pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("reader", os.path.join(REPO, "tools", "device",
                                                                       "read_checkpoint_torch.py"))
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    name = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))[-1]  # the last step's
    tensors, meta = reader.load(str(ckpt / name))
    ours = coppice.load(ckpt / name)
    for w in ("model.fc1.weight", "model.fc2.weight"):
        assert meta["coppice.format." + w] == fmt
        size = json.loads(meta["coppice.shape." + w])
        parts = {k[len(w) + 1:]: v for k, v in tensors.items() if k.startswith(w + ".")}
        indices, values = reader.levels_to_coo(parts, meta["coppice.attr." + w + ".levels"], size)
        rebuilt = torch.sparse_coo_tensor(indices, values, size).coalesce().to_dense().numpy()
        np.testing.assert_array_equal(rebuilt, ours[w].to_dense().numpy())


def test_a_format_declared_with_nm_groups_trains_with_sr_ste_as_nm_does():
    """A format registered from Python with nm's levels has nm's groups: SR-STE projects LeNet-300-100's hidden
    weights onto it, on nm's kernels, and the run is nm's bit for bit; rigl_nm regrows inside its groups."""
    levels.register("py_nm24", "(dense, n_out_of_m(2:4, u8))")

    def job(fmt, method):
        return lenet_job(fmt, mask_update=method, sparsity={"density": 0.5, "distribution": "uniform",
                                                            "rules": [{"regex": "fc[12]\\.weight", "format": fmt}]},
                         training={"steps": 30})

    for method in ({"method": "sr_ste", "interval": 2, "decay": 0.0002},
                   {"method": "rigl_nm", "end_step": 20, "interval": 10, "drop_fraction": 0.3}):
        nm, declared = [], []
        coppice.train(job("nm", method), callback=lambda step, loss: nm.append(loss))
        coppice.train(job("py_nm24", method), callback=lambda step, loss: declared.append(loss))
        assert len(nm) == 30 and declared == nm, method["method"]


def test_a_declaration_in_a_jobs_map_form_is_the_same_declaration():
    """levels.register takes the dict a job's sparsity.formats holds (levels, block, index, values) as well as text;
    errors name the field."""
    hybrid = {"block": [16, 16], "levels": ["dense", "ranged", "compressed(non-unique)", "singleton"]}
    assert levels.register("py_ell_of_coo_map", hybrid) == levels.describe(
        "blocked 16x16 (dense, ranged, compressed(non-unique), singleton)")
    square = {"block": 4, "levels": ["dense", "compressed", "dense", "dense"], "index": "i64", "values": "bf16"}
    assert levels.register("py_bsr_map", square) == levels.describe(
        "blocked 4x4 (dense, compressed, dense, dense) index i64 values bf16")
    with pytest.raises(coppice.Error, match=r"declaration\.levels\[1\]: level 1 'rangd'"):
        levels.register("py_bad_map", {"levels": ["dense", "rangd"]})
    with pytest.raises(coppice.Error, match=r"declaration: unknown key 'blocks' \(expected levels, block, index"):
        levels.register("py_bad_map", {"levels": ["dense", "ranged"], "blocks": 2})
    with pytest.raises(coppice.Error, match=r"declaration\.block: cannot read 'x' as \[rows, columns\] or one size"):
        levels.register("py_bad_map", {"levels": ["dense", "ranged"], "block": "x"})
    with pytest.raises(coppice.Error, match=r"declaration\.block\[1\]: a block extent must be >= 1, got 0"):
        levels.register("py_bad_map", {"levels": ["dense", "compressed", "dense", "dense"], "block": [2, 0]})
    with pytest.raises(coppice.Error, match=r"declaration\.values: must be f32, f64, bf16 or f16, got 'i8'"):
        levels.register("py_bad_map", {"levels": ["dense", "ranged"], "values": "i8"})
    with pytest.raises(coppice.Error, match="a declaration is text or a dict, got int"):
        levels.register("py_bad_map", 5)
    assert levels.registered("py_bad_map") is None
