"""Saving tensors and models from Python (issue 34): coppice.sparse_from_parts,
pickling and deepcopy of coppice.Tensor, coppice.save / coppice.load
(safetensors, the trainer's encoding of sparse tensors) and
Module.load_state_dict keeping a sparse parameter's format."""
import copy
import json
import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

import coppice
from conftest import tiny_job

# Options for the formats that need them (a format the library adds later
# without options is covered with none).
OPTIONS = {"bsr": dict(block_rows=2, block_cols=4), "blocked_ell": dict(block_rows=2), "nm": dict(n=2, m=4)}
SPARSE_FORMATS = [f for f in coppice.formats() if f != "dense"]
FLOAT_DTYPES = ["f32", "f64", "bf16", "f16"]
ALL_DTYPES = FLOAT_DTYPES + ["i32", "i64", "u8", "bool"]


def dense(rows=8, cols=8, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def nm_mask(rows=8, cols=8):
    """2 of every 4 along a row (positions 0 and 2), which every format holds."""
    m = np.zeros((rows, cols), bool)
    m[:, 0::4] = True
    m[:, 2::4] = True
    return m


def make(fmt, dtype="f32", seed=0):
    """A tensor of `fmt` and `dtype` (values dense random, the nm_mask pattern)."""
    d = coppice.tensor(dense(seed=seed)).to(dtype)
    if fmt == "dense":
        return d
    return coppice.sparse_from_mask(d, nm_mask(), fmt, **OPTIONS.get(fmt, {}))


def bits(t):
    """The bytes of a dense tensor (bf16 widened to f32 exactly), its dtype and shape."""
    if t.dtype == "bf16":
        return "bf16", tuple(t.shape), np.asarray(t.to("f32")).tobytes()
    return t.dtype, tuple(t.shape), np.asarray(t).tobytes()


def assert_same(a, b):
    """Format, shape, dtype, attributes and every part bit for bit."""
    assert (a.format, a.shape, a.dtype, a.device) == (b.format, b.shape, b.dtype, b.device)
    assert a.attributes() == b.attributes()
    pa, pb = a.parts(), b.parts()
    assert sorted(pa) == sorted(pb)
    for name in pa:
        assert bits(pa[name]) == bits(pb[name]), name


def test_the_formats_are_covered():
    assert {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"} <= set(SPARSE_FORMATS)


# ---- sparse_from_parts ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", SPARSE_FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_from_parts_rebuilds_every_format(fmt, dtype):
    t = make(fmt, dtype)
    r = coppice.sparse_from_parts(t.format, t.shape, t.parts(), **t.attributes())
    assert_same(t, r)
    np.testing.assert_array_equal(np.asarray(r.to_dense().to("f32")), np.asarray(t.to_dense().to("f32")))


@pytest.mark.parametrize("fmt", SPARSE_FORMATS)
def test_from_parts_takes_numpy_arrays_and_copies_the_indices(fmt):
    t = make(fmt)
    parts = {k: np.array(v.to("f32") if v.dtype == "bf16" else v) for k, v in t.parts().items()}
    r = coppice.sparse_from_parts(fmt, t.shape, parts, **t.attributes())
    assert_same(t, r)
    # Writing the caller's index arrays afterwards does not reach the tensor.
    for name, a in parts.items():
        if name != "values":
            a[...] = 0 if a.dtype != bool else False
            assert not r.parts()[name].numpy().flags.writeable
    assert_same(t, r)


def test_attributes_are_what_parts_does_not_carry():
    assert make("bsr").attributes() == {"block_rows": 2, "block_cols": 4}
    assert make("blocked_ell").attributes() == {"block_rows": 2, "block_cols": 2}
    assert make("nm").attributes() == {"n": 2, "m": 4}
    assert make("coo").attributes() == {"coalesced": True}
    assert make("csr").attributes() == {} and make("dense").attributes() == {}


def csr_parts():
    t = make("csr")
    return t.shape, {k: np.array(v) for k, v in t.parts().items()}


def from_parts_error(fmt, shape, parts, **attrs):
    with pytest.raises(coppice.Error) as e:
        coppice.sparse_from_parts(fmt, shape, parts, **attrs)
    return str(e.value)


def test_bad_parts_missing_part():
    shape, parts = csr_parts()
    del parts["col_indices"]
    msg = from_parts_error("csr", shape, parts)
    assert "missing part 'col_indices'" in msg and "crow_indices, col_indices, values" in msg


def test_bad_parts_unexpected_part():
    shape, parts = csr_parts()
    parts["mask"] = np.ones(3, bool)
    assert "unexpected part 'mask'" in from_parts_error("csr", shape, parts)


def test_bad_parts_wrong_dtype():
    shape, parts = csr_parts()
    parts["col_indices"] = parts["col_indices"].astype(np.float32)
    msg = from_parts_error("csr", shape, parts)
    assert "col_indices must be i32 or i64, got f32" in msg
    shape, parts = csr_parts()
    parts["values"] = parts["values"].astype(np.int32)
    assert "values must be floating point" in from_parts_error("csr", shape, parts)


def test_bad_parts_wrong_length():
    shape, parts = csr_parts()
    parts["crow_indices"] = parts["crow_indices"][:-1]
    assert "crow_indices has 8 entries, expected 9" in from_parts_error("csr", shape, parts)
    shape, parts = csr_parts()
    parts["values"] = parts["values"][:-1]
    msg = from_parts_error("csr", shape, parts)
    assert "values has shape" in msg and "col_indices" in msg


def test_bad_parts_index_out_of_range():
    shape, parts = csr_parts()
    parts["col_indices"][3] = 99
    assert "col_indices[3] = 99 is out of range [0, 8)" in from_parts_error("csr", shape, parts)
    t = make("coo")
    parts = {k: np.array(v) for k, v in t.parts().items()}
    parts["indices"][1, 5] = -1
    msg = from_parts_error("coo", t.shape, parts)
    assert "sparse_coo" in msg and "out of" in msg


def test_bad_parts_unsorted():
    shape, parts = csr_parts()
    parts["col_indices"][[0, 1]] = parts["col_indices"][[1, 0]]
    msg = from_parts_error("csr", shape, parts)
    assert "col_indices[1]" in msg and "smaller than the entry before it" in msg
    # COO declared coalesced must be sorted; undeclared, the same parts are taken.
    t = make("coo")
    parts = {k: np.array(v) for k, v in t.parts().items()}
    parts["indices"] = parts["indices"][:, ::-1].copy()
    parts["values"] = parts["values"][::-1].copy()
    assert "declared coalesced" in from_parts_error("coo", t.shape, parts, coalesced=True)
    assert coppice.sparse_from_parts("coo", t.shape, parts).attributes() == {"coalesced": False}


def test_bad_parts_shape_and_attributes():
    shape, parts = csr_parts()
    assert "crow_indices has 9 entries, expected 10" in from_parts_error("csr", [9, 8], parts)
    assert "col_indices[2] = 4 is out of range [0, 4)" in from_parts_error("csr", [8, 4], parts)
    t = make("masked")
    assert "the parts give shape [8, 8]" in from_parts_error("masked", [4, 16], t.parts())
    t = make("nm")
    assert "missing attribute n" in from_parts_error("nm", t.shape, t.parts(), m=4)
    assert "missing attribute block_rows" in from_parts_error("blocked_ell", [8, 8], make("blocked_ell").parts())
    assert "unexpected attribute 'n'" in from_parts_error("csr", shape, parts, n=2)
    msg = from_parts_error("bsr", [8, 8], make("bsr").parts(), block_rows=4, block_cols=4)
    assert "block = '4x4' disagrees with values" in msg
    assert "unknown format 'csx'" in from_parts_error("csx", shape, parts)
    assert "parts['values'] is a csr tensor" in from_parts_error("csr", shape, {**parts, "values": make("csr")})


# ---- pickle and deepcopy ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["dense"] + SPARSE_FORMATS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_pickle_and_deepcopy_round_trip(fmt, dtype):
    if fmt != "dense" and dtype not in FLOAT_DTYPES:
        with pytest.raises(coppice.Error):  # sparse values are floating point
            make(fmt, dtype)
        return
    t = make(fmt, dtype)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert_same(t, pickle.loads(pickle.dumps(t, protocol=proto)))
    c = copy.deepcopy(t)
    assert_same(t, c)
    # A deep copy has its own memory.
    assert c.parts()["values"].data_ptr() != t.parts()["values"].data_ptr()


def test_pickle_keeps_edge_cases():
    # 0-d, empty, a strided view, read-only memory, an empty sparse tensor.
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    frozen = a.copy()
    frozen.setflags(write=False)
    for t in [coppice.tensor(np.float32(3.5)), coppice.tensor(np.zeros((0, 5), np.float32)),
              coppice.tensor(a[:, ::2]), coppice.tensor(frozen),
              coppice.sparse_from_mask(np.ones((4, 4), np.float32), np.zeros((4, 4), bool), "csr")]:
        r = pickle.loads(pickle.dumps(t))
        assert (r.format, r.shape, r.dtype) == (t.format, t.shape, t.dtype)
        np.testing.assert_array_equal(np.asarray(r.to_dense()), np.asarray(t.to_dense()))
    # NaN payloads and negative zero survive (the bytes, not the values).
    odd = np.array([np.nan, -0.0, np.inf], np.float32)
    odd.view(np.uint32)[0] = 0x7FC00123
    assert np.asarray(pickle.loads(pickle.dumps(coppice.tensor(odd)))).tobytes() == odd.tobytes()


def test_unpickling_bad_state_raises():
    rebuild, (version, data) = make("csr").__reduce__()
    with pytest.raises(coppice.Error, match="version 99"):
        rebuild(99, data)
    with pytest.raises(coppice.Error, match="pickled coppice.Tensor"):
        rebuild(version, data[:-3])
    assert_same(make("csr"), rebuild(version, data))


# ---- coppice.save and coppice.load ------------------------------------------------------------


def every_format_dict():
    out = {}
    for fmt in ["dense"] + SPARSE_FORMATS:
        for dtype in FLOAT_DTYPES:
            out[f"{fmt}.{dtype}"] = make(fmt, dtype, seed=len(out))
    for dtype in ["i32", "i64", "u8", "bool"]:
        out[f"dense.{dtype}"] = make("dense", dtype)
    return out


def test_save_load_round_trip(tmp_path):
    tensors = every_format_dict()
    path = tmp_path / "all.safetensors"
    coppice.save(path, tensors, metadata={"note": "issue 34"})
    back, meta = coppice.load(str(path), metadata=True)
    assert list(back) == list(tensors)  # the file's order is the dict's
    assert meta == {"note": "issue 34"}
    for name, t in tensors.items():
        assert_same(t, back[name])
    assert coppice.load(path).keys() == back.keys()
    assert os.listdir(tmp_path) == ["all.safetensors"]  # no temporary file left


def read_header(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n])


def test_save_writes_the_checkpoint_encoding(tmp_path):
    # What tools/device/read_checkpoint_torch.py reads: w.<part> entries and coppice.* metadata.
    path = tmp_path / "w.safetensors"
    coppice.save(path, {"w": make("bsr"), "b": np.ones(8, np.float32)})
    header = read_header(path)
    meta = header.pop("__metadata__")
    assert sorted(header) == ["b", "w.col_indices", "w.crow_indices", "w.values"]
    assert meta["coppice.format.w"] == "bsr" and json.loads(meta["coppice.shape.w"]) == [8, 8]
    assert meta["coppice.attr.w.block"] == "2x4"
    assert header["w.values"]["dtype"] == "F32" and header["w.values"]["shape"][1:] == [2, 4]


def read_entries(path):
    """Every entry of a safetensors file as NumPy (read_checkpoint_torch.py's load, without PyTorch)."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    kinds = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": bool}
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], kinds[info["dtype"]]).reshape(info["shape"])
    return out, meta


def test_a_python_file_rebuilds_without_coppice(tmp_path):
    # As read_checkpoint_torch.py rebuilds CSR and COO weights from a checkpoint.
    w, c = make("csr"), make("coo")
    coppice.save(tmp_path / "x.safetensors", {"w": w, "c": c})
    e, meta = read_entries(tmp_path / "x.safetensors")
    rows, cols = json.loads(meta["coppice.shape.w"])
    d = np.zeros((rows, cols), np.float32)
    for r in range(rows):
        for k in range(e["w.crow_indices"][r], e["w.crow_indices"][r + 1]):
            d[r, e["w.col_indices"][k]] = e["w.values"][k]
    np.testing.assert_array_equal(d, np.asarray(w.to_dense()))
    d = np.zeros(json.loads(meta["coppice.shape.c"]), np.float32)
    d[tuple(e["c.indices"])] = e["c.values"]
    np.testing.assert_array_equal(d, np.asarray(c.to_dense()))


def test_load_reads_a_trainer_checkpoint(tmp_path):
    coppice.train(tiny_job(), overrides=[f"checkpoint.dir={tmp_path}", "logging.metrics="], max_steps=5)
    (name,) = [f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]
    ckpt, meta = coppice.load(tmp_path / name, metadata=True)
    assert meta["trainer.format"] == "coppice-checkpoint-2"
    state = {k[len("model."):]: t for k, t in ckpt.items() if k.startswith("model.")}
    assert state["fc1.weight"].format == "csr" and state["fc3.weight"].format == "dense"
    model = coppice.nn.make_model("mlp", sizes=[32, 128, 128, 4])
    model.load_state_dict(state)  # dense parameters take the checkpoint's CSR weights
    for k, t in state.items():
        assert_same(t, model.state_dict()[k])
    # And back: that state saved from Python is the same file the C++ save_module writes (read_sparse_safetensors).
    coppice.save(tmp_path / "state.safetensors", model.state_dict())
    for k, t in coppice.load(tmp_path / "state.safetensors").items():
        assert_same(state[k], t)


def test_load_reads_a_file_written_by_hand(tmp_path):
    # Any safetensors writer following the convention (here: the bytes by hand).
    crow, col, vals = np.array([0, 1, 2], np.int32), np.array([1, 0], np.int32), np.array([2.0, 3.0], np.float32)
    entries, blob = {}, b""
    for name, a in [("w.crow_indices", crow), ("w.col_indices", col), ("w.values", vals)]:
        entries[name] = {"dtype": {"i": "I32", "f": "F32"}[a.dtype.kind], "shape": list(a.shape),
                         "data_offsets": [len(blob), len(blob) + a.nbytes]}
        blob += a.tobytes()
    entries["__metadata__"] = {"coppice.format.w": "csr", "coppice.shape.w": "[2, 2]"}
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + blob)
    w = coppice.load(path)["w"]
    assert w.format == "csr"
    np.testing.assert_array_equal(np.asarray(w.to_dense()), [[0, 2], [3, 0]])
    # Bad parts in a file are refused naming the file and the tensor.
    entries_bad = dict(entries)
    entries_bad["__metadata__"] = {"coppice.format.w": "csr", "coppice.shape.w": "[2, 1]"}
    header = json.dumps(entries_bad).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + blob)
    with pytest.raises(coppice.Error, match="hand.safetensors.*tensor 'w'.*col_indices"):
        coppice.load(path)


def test_save_into_a_missing_directory_raises(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "x.safetensors"
    with pytest.raises(coppice.Error, match="cannot create"):
        coppice.save(path, {"w": make("csr")})
    assert not path.parent.exists()


def test_save_into_a_read_only_directory_raises():
    # Root writes anywhere: then the save runs in a child process as user nobody.
    import shutil
    import tempfile
    top = tempfile.mkdtemp()
    try:
        os.chmod(top, 0o755)
        ro = os.path.join(top, "ro")
        os.mkdir(ro, 0o555)
        os.chmod(ro, 0o555)
        code = f"""
import os, numpy as np, coppice
if os.geteuid() == 0:
    try:
        os.setgid(65534)
        os.setuid(65534)
    except PermissionError:
        print("cannot drop root")
        raise SystemExit
try:
    coppice.save({os.path.join(ro, "x.safetensors")!r}, {{"w": np.ones((4, 4), np.float32)}})
except coppice.Error as e:
    print("raised:", e)
"""
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        if "cannot drop root" in out.stdout:
            pytest.skip("running as root without the right to become another user")
        assert "raised:" in out.stdout and "cannot create" in out.stdout and "Permission denied" in out.stdout
        assert os.listdir(ro) == []
    finally:
        os.chmod(os.path.join(top, "ro"), 0o755)
        shutil.rmtree(top)


def test_a_failed_write_leaves_no_partial_file(tmp_path):
    # The write fails half way (a file-size limit: EFBIG after 64 KiB), in a child process.
    path = tmp_path / "big.safetensors"
    path.write_bytes(b"old contents")
    code = f"""
import resource, signal, numpy as np, coppice
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    coppice.save({str(path)!r}, {{"w": np.ones((512, 512), np.float32)}})
except coppice.Error as e:
    print("raised:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "raised:" in out.stdout and "big.safetensors" in out.stdout
    assert path.read_bytes() == b"old contents"  # the old file, whole
    assert os.listdir(tmp_path) == ["big.safetensors"]  # and no temporary file


def test_save_refuses_bad_input_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "x.safetensors"
    coppice.save(path, {"a": np.zeros(3, np.float32)})
    before = path.read_bytes()
    with pytest.raises(coppice.Error, match="collides"):
        coppice.save(path, {"w": make("csr"), "w.values": np.zeros(3, np.float32)})
    with pytest.raises(coppice.Error, match="reserved"):
        coppice.save(path, {"a": np.zeros(3, np.float32)}, metadata={"coppice.format.a": "csr"})
    with pytest.raises(coppice.Error, match="tensors must be a dict"):
        coppice.save(path, [("a", np.zeros(3))])
    with pytest.raises(coppice.Error, match="a key of tensors is int"):
        coppice.save(path, {1: np.zeros(3)})
    assert path.read_bytes() == before
    with pytest.raises(coppice.Error, match="nothing.safetensors"):
        coppice.load(tmp_path / "nothing.safetensors")
    (tmp_path / "short.safetensors").write_bytes(before[:-2])
    with pytest.raises(coppice.Error, match="short.safetensors"):
        coppice.load(tmp_path / "short.safetensors")


# ---- Module state: load_state_dict keeps formats; save/load round trip --------------------------


def sparse_model(seed=0):
    """A Sequential of Linear layers, each weight in one sparse format (and one dense)."""
    coppice.manual_seed(seed)
    formats = SPARSE_FORMATS + ["dense"]
    model = coppice.nn.Sequential(*[coppice.nn.Linear(8, 8) for _ in formats])
    for i, fmt in enumerate(formats):
        w = np.asarray(model.parameter(f"{i}.weight").tensor)
        if fmt != "dense":
            model.set_parameter(f"{i}.weight", coppice.sparse_from_mask(w, nm_mask(), fmt, **OPTIONS.get(fmt, {})))
    return model, formats


def test_state_dict_save_load_round_trip(tmp_path):
    model, formats = sparse_model(seed=1)
    state = model.state_dict()
    assert [state[f"{i}.weight"].format for i in range(len(formats))] == formats
    coppice.save(tmp_path / "model.safetensors", state)
    loaded = coppice.load(tmp_path / "model.safetensors")
    other, _ = sparse_model(seed=2)  # the same formats, other values
    other.load_state_dict(loaded)
    for name, t in model.state_dict().items():
        assert_same(t, other.state_dict()[name])
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    assert np.asarray(model(x).tensor).tobytes() == np.asarray(other(x).tensor).tobytes()
    # The loaded values are the module's own: training it leaves `loaded` alone.
    before = bits(loaded["0.weight"].parts()["values"])
    v = other.state_dict()["0.weight"].parts()["values"]
    np.asarray(v)[...] = 0
    assert bits(loaded["0.weight"].parts()["values"]) == before


def test_load_state_dict_refuses_another_format():
    model, formats = sparse_model()
    i = formats.index("bsr")
    key = f"{i}.weight"
    w = model.state_dict()[key]
    before = bits(w.parts()["values"])
    dense_w = np.asarray(w.to_dense())
    state = model.state_dict()
    state[key] = dense_w
    with pytest.raises(coppice.Error) as e:
        model.load_state_dict(state)
    msg = str(e.value)
    assert f"state['{key}'] is dense" in msg and "is bsr 2x4" in msg
    # Another block shape is another format too; so is csr for bsr, and nm of another n:m.
    state[key] = coppice.tensor(dense_w).to_format("bsr", block_rows=2, block_cols=2)
    with pytest.raises(coppice.Error, match=r"is bsr 2x2, .* is bsr 2x4"):
        model.load_state_dict(state)
    state[key] = coppice.tensor(dense_w).to_format("csr")
    with pytest.raises(coppice.Error, match=r"is csr, .* is bsr 2x4"):
        model.load_state_dict(state, strict=False)
    j = formats.index("nm")
    state = model.state_dict()
    state[f"{j}.weight"] = coppice.sparse_from_mask(np.asarray(state[f"{j}.weight"].to_dense()), nm_mask(), "nm",
                                                    n=4, m=8)
    with pytest.raises(coppice.Error, match=r"is nm 4:8, .* is nm 2:4"):
        model.load_state_dict(state)
    # Nothing changed.
    assert model.state_dict()[key].format == "bsr"
    assert bits(model.state_dict()[key].parts()["values"]) == before


def test_load_state_dict_same_format_and_dense_parameters():
    model, formats = sparse_model()
    # The same format with another pattern is taken (a mask update's state).
    i = formats.index("csr")
    key = f"{i}.weight"
    mask = np.eye(8, dtype=bool)
    state = model.state_dict()
    state[key] = coppice.sparse_from_mask(np.full((8, 8), 2.0, np.float32), mask, "csr")
    model.load_state_dict(state)
    assert model.state_dict()[key].nnz == 8
    # A dense parameter takes a dense array (copied in place) or a sparse tensor (as in C++).
    lin = coppice.nn.Linear(8, 8)
    lin.load_state_dict({"weight": np.ones((8, 8), np.float32), "bias": np.zeros(8, np.float32)})
    assert lin.state_dict()["weight"].format == "dense"
    lin.load_state_dict({"weight": make("csr"), "bias": np.zeros(8, np.float32)})
    assert lin.state_dict()["weight"].format == "csr"
