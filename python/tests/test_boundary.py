"""A Python boundary that cannot crash (issue 30): misuse in the manner of a careless user ends in a clear
exception naming the argument or callback, never in a crash of the interpreter. Each case runs in its own
interpreter, so that a crash (SIGSEGV, SIGBUS, an abort) fails that case instead of ending the run."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

# What every case has: NumPy, coppice, and refused(f, *patterns): f() must raise `error` (coppice.Error unless
# given) whose message contains every pattern.
PRELUDE = """
import numpy as np, coppice
from coppice import nn, optim

def refused(f, *patterns, error=None):
    error = error or coppice.Error
    try:
        f()
    except error as e:
        message = str(e)
        for p in patterns:
            assert p in message, f"{p!r} is not in the message: {message}"
        return e
    raise AssertionError(f"no {error.__name__} raised")
"""


def run_isolated(code, setup="", timeout=300):
    """Runs `code` after the prelude (and `setup`) in a fresh interpreter; fails on a signal or a non-zero exit."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + setup + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=os.path.dirname(os.path.abspath(__file__)))
    if proc.returncode < 0:
        pytest.fail(f"the interpreter was killed by {signal.Signals(-proc.returncode).name}\n{proc.stderr[-4000:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


# ---- memory the caller owns: writability carried both ways --------------------------------------------------


def test_an_optimizer_step_into_a_read_only_memory_map_is_refused_naming_the_parameter(tmp_path):
    run_isolated(f"""
        path = {str(tmp_path / "w.f32")!r}
        np.arange(16, dtype=np.float32).tofile(path)
        w = coppice.Variable(np.memmap(path, dtype=np.float32, mode="r", shape=(4, 4)), requires_grad=True, name="w")
        coppice.sum(w * w).backward()
        opt = optim.SGD([w], lr=0.1)
        refused(opt.step, "SGD.step: parameter 'w' (group 0, index 0)", "read-only memory")
        assert (np.fromfile(path, np.float32) == np.arange(16)).all()
    """)


def test_an_optimizer_step_into_a_read_only_array_is_refused_and_leaves_it_unchanged():
    run_isolated("""
        a = np.ones((3, 5), np.float32)
        a.setflags(write=False)
        b = coppice.Variable(np.zeros(5, np.float32), requires_grad=True)  # writable: stepped as ever
        w = coppice.Variable(a, requires_grad=True)
        x = coppice.sum(w * 2.0) + coppice.sum(b * 3.0)
        x.backward()
        opt = optim.Adam([{"params": [b]}, {"params": [w], "lr": 0.5}])
        refused(opt.step, "Adam.step: parameter (group 1, index 0)", "read-only")
        assert (a == 1).all()
        w.grad = None  # no gradient: never written, so not refused
        optim.Adam([w]).step()
        # load_state_dict into a model whose weight is read-only memory: refused too (Tensor.copy_).
        lin = nn.Linear(5, 3, bias=False)
        lin.set_parameter("weight", coppice.Variable(a, requires_grad=True))
        refused(lambda: lin.load_state_dict({"weight": np.zeros((3, 5), np.float32)}), "read-only memory")
        assert (a == 1).all()
    """)


def test_numpy_of_a_read_only_tensor_is_read_only_every_way():
    run_isolated("""
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        a.setflags(write=False)
        t = coppice.tensor(a)
        for view in (t.numpy(), np.asarray(t), coppice.Variable(t).numpy(), t.to_dense().numpy()):
            assert not view.flags.writeable
            refused(lambda: view.__setitem__((0, 0), 9.0), "read-only", error=ValueError)
        assert memoryview(t).readonly
        refused(lambda: np.from_dlpack(t), "read-only")
        writable = coppice.tensor(np.zeros(3, np.float32))
        assert writable.numpy().flags.writeable  # a writable array stays writable: the same memory
        c = coppice.tensor(a).to("f64")  # a copy is the library's own
        assert c.numpy().flags.writeable
        assert (a == np.arange(6).reshape(2, 3)).all()
        # bytes (the buffer protocol) are read-only memory too
        assert not coppice.tensor(np.frombuffer(b"\\0" * 16, np.float32)).numpy().flags.writeable
    """)


def test_index_parts_are_read_only_and_the_product_stays_right():
    run_isolated("""
        rng = np.random.default_rng(0)
        dense = rng.standard_normal((8, 16)).astype(np.float32)
        dense[np.abs(dense) < 1.0] = 0
        x = rng.standard_normal((16, 4)).astype(np.float32)
        for fmt, opts in [("csr", {}), ("coo", {}), ("bsr", {"block_rows": 4, "block_cols": 4}), ("masked", {}),
                          ("csc", {})]:
            s = coppice.tensor(dense).to_format(fmt, **opts)
            for name, part in s.parts().items():
                a = part.numpy()
                if name == "values":
                    assert a.flags.writeable, fmt  # the stored values: the same memory, writable
                    continue
                assert not a.flags.writeable, (fmt, name)
                refused(lambda: a.__setitem__(..., 10**9 if a.dtype.kind in "iu" else 0), "read-only",
                        error=ValueError)
                refused(lambda: coppice.Variable(part, requires_grad=False).data.numpy().fill(0), "read-only",
                        error=ValueError)
            np.testing.assert_allclose(coppice.matmul(s, x).numpy(), dense @ x, rtol=1e-5, atol=1e-5)
    """)


# ---- conversions: checked before use -------------------------------------------------------------------------


def test_a_ragged_list_is_refused_naming_the_argument():
    run_isolated("""
        e = refused(lambda: coppice.tensor([[1.0, 2.0], [3.0]]), "coppice.tensor: data is not an array",
                    "inhomogeneous")
        assert isinstance(e.__cause__, ValueError)
        refused(lambda: coppice.Variable([[1.0], [2.0, 3.0]]), "coppice.Variable: data")
        refused(lambda: coppice.relu([[1.0], [2.0, 3.0]]), "argument x")
        refused(lambda: coppice.add(np.ones(2, np.float32), [[1.0], [2.0, 3.0]]), "argument b")
        refused(lambda: coppice.Tensor([[1], [2, 3]]), "coppice.Tensor: array")
        refused(lambda: coppice.sparse_from_mask(np.ones((2, 2), np.float32), [[True], [False, True]], "csr"),
                "sparse_from_mask: mask")
        refused(lambda: coppice.tensor(np.array([[1.0], [2.0, 3.0]], dtype=object)), "coppice.tensor: data",
                "object", "ragged")
    """)


def test_an_object_whose_array_raises_is_refused_with_its_exception_as_the_cause():
    run_isolated("""
        class Broken:
            def __array__(self, dtype=None):
                raise KeyError("no array today")
        e = refused(lambda: coppice.tensor(Broken()), "coppice.tensor: data is not an array",
                    "KeyError: 'no array today'")
        assert isinstance(e.__cause__, KeyError)
        refused(lambda: coppice.cross_entropy(coppice.Variable(np.zeros((2, 3), np.float32)), Broken()),
                "cross_entropy: target")
        lin = nn.Linear(2, 2)
        refused(lambda: lin(Broken()), "Linear(x): x")
        # KeyboardInterrupt stays what it is
        class Interrupted:
            def __array__(self, dtype=None):
                raise KeyboardInterrupt
        refused(lambda: coppice.tensor(Interrupted()), error=KeyboardInterrupt)
    """)


def test_a_ragged_list_given_to_load_state_dict_is_refused_naming_the_key():
    run_isolated("""
        lin = nn.Linear(2, 2)
        before = lin.weight.numpy().copy()
        refused(lambda: lin.load_state_dict({"weight": [[1.0, 2.0], [3.0]], "bias": [0.0, 0.0]}),
                "load_state_dict: state['weight'] is not an array")
        refused(lambda: lin.load_state_dict({0: np.zeros((2, 2), np.float32)}), "a key of the state is int")
        refused(lambda: lin.load_state_dict({"weight": np.zeros((2, 2), complex), "bias": np.zeros(2)}),
                "load_state_dict: state['weight'] has NumPy dtype complex128")
        assert (lin.weight.numpy() == before).all()
    """)


def test_dtypes_and_byte_orders():
    run_isolated("""
        big = np.arange(6, dtype=">f4").reshape(2, 3)  # big-endian: converted, not read as garbage
        t = coppice.tensor(big)
        assert t.dtype == "f32"
        np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
        np.testing.assert_array_equal(coppice.tensor(np.arange(4, dtype=">i8")).numpy(), [0, 1, 2, 3])
        np.testing.assert_allclose((coppice.Variable(big) * 2.0).numpy(), 2 * np.arange(6).reshape(2, 3))
        unaligned = np.frombuffer(b"\\0" + np.arange(4, dtype="<f8").tobytes(), dtype="<f8", offset=1)
        assert not unaligned.flags.aligned
        np.testing.assert_array_equal(coppice.tensor(unaligned).numpy(), [0, 1, 2, 3])
        for bad, name in [(np.zeros(2, np.complex64), "complex64"), (np.zeros(2, np.int16), "int16"),
                          (np.array(["a"]), "<U1"), (np.zeros(2, "datetime64[s]"), "datetime64"),
                          (np.zeros(2, [("a", "f4")]), "('a'"), (np.zeros(2, np.longdouble), "float128")]:
            refused(lambda: coppice.tensor(bad), "coppice.tensor: data has NumPy dtype", name, "astype")
        refused(lambda: coppice.tensor("text"), "coppice.tensor: data has NumPy dtype <U4")
        refused(lambda: coppice.tensor(None), "coppice.tensor: data has NumPy dtype object")
        assert coppice.tensor(3.5).shape == [] and coppice.tensor([]).shape == [0]
    """)


DLPACK = """
import ctypes

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]

class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
capsule_name = ctypes.pythonapi.PyCapsule_GetName
capsule_name.restype = ctypes.c_char_p
capsule_name.argtypes = [ctypes.py_object]
KEEP = []  # what the capsules point to stays alive

def capsule(shape, strides=None, ndim=None, data=None, offset=0, dtype=(2, 32)):
    buf = np.arange(64, dtype=np.float32)
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(len(strides), 1))(*strides) if strides is not None else None
    m = DLManagedTensor()
    m.dl_tensor.data = buf.ctypes.data if data is None else data
    m.dl_tensor.device = DLDevice(1, 0)
    m.dl_tensor.ndim = len(shape) if ndim is None else ndim
    m.dl_tensor.dtype = DLDataType(dtype[0], dtype[1], 1)
    m.dl_tensor.shape = shape_arr if shape else None
    m.dl_tensor.strides = strides_arr
    m.dl_tensor.byte_offset = offset
    KEEP.append((buf, shape_arr, strides_arr, m))
    return capsule_new(ctypes.addressof(m), b"dltensor", None)
"""


def test_dlpack_capsules_with_bad_dimensions_or_strides_are_refused():
    run_isolated(setup=DLPACK, code="""
        good = coppice.from_dlpack(capsule([4, 4]))
        np.testing.assert_array_equal(good.numpy(), np.arange(16).reshape(4, 4))
        np.testing.assert_array_equal(coppice.from_dlpack(capsule([4], strides=[2])).numpy(), [0, 2, 4, 6])
        cases = [
            (dict(shape=[4], ndim=-1), "-1 dimensions"),
            (dict(shape=[4], ndim=1 << 20), "1048576 dimensions"),
            (dict(shape=[], ndim=2), "no shape"),
            (dict(shape=[-3, 4]), "size -3 of dimension 0"),
            (dict(shape=[1 << 40, 1 << 40]), "spans more than 2^63"),
            (dict(shape=[4, 4], strides=[1 << 62, 1]), "spans more than 2^63"),
            (dict(shape=[4, 4], strides=[-4, 1]), "stride -4 of dimension 0 is negative"),
            (dict(shape=[4], data=0), "no data"),
            (dict(shape=[4], offset=1), "not aligned"),
            (dict(shape=[4], dtype=(5, 32)), "has no Coppice dtype"),
        ]
        for kwargs, pattern in cases:
            c = capsule(**kwargs)
            refused(lambda: coppice.from_dlpack(c), "from_dlpack", pattern)
            assert capsule_name(c) == b"dltensor"  # refused: left unused, for its producer to free
        empty = coppice.from_dlpack(capsule([0, 1 << 62]))
        assert empty.shape == [0, 1 << 62] and empty.numel() == 0
    """)


# ---- what callbacks return: checked, naming the callback ------------------------------------------------------


GROWTH = """
import sys
sys.path.insert(0, ".")
from conftest import tiny_job

POLICIES = []

def growth_refused(policy, *patterns):
    name = f"policy_{len(POLICIES)}"  # a name is registered once
    POLICIES.append(name)
    coppice.register_growth_policy(name, policy)
    refused(lambda: coppice.train(tiny_job(method="rigl", end_step=200, interval=20, growth=name), max_steps=60),
            f"growth policy '{name}' (Python) returned", *patterns)
"""


def test_a_growth_policy_that_returns_none_or_a_bad_array_is_refused_naming_it():
    run_isolated(setup=GROWTH, code="""
        growth_refused(lambda **_: None, "returned None; it must return")
        growth_refused(lambda k, candidates, **_: candidates[:k].reshape(1, -1), "array of shape [1,", "1-D")
        growth_refused(lambda k, candidates, **_: candidates[:k].astype(np.float64), "float64", "integer")
        growth_refused(lambda k, candidates, weight, **_: weight != 0, "a bool array", "(a mask?)", "flatnonzero")
        growth_refused(lambda k, candidates, **_: [[1, 2], [3]], "list, which is not an array")
        growth_refused(lambda k, candidates, **_: "positions", "<U9")
        growth_refused(lambda k, candidates, **_: [2 ** 70] * k, "object")
    """)


def test_a_forward_that_returns_what_is_not_a_variable_is_refused_naming_the_module():
    run_isolated("""
        class Returns(nn.Module):
            def __init__(self, value):
                super().__init__("Returns")
                self.value = value
            def forward(self, x):
                return self.value
        x = np.ones((2, 3), np.float32)
        refused(lambda: Returns(3)(x), "module Returns.forward returned int", "coppice.Variable")
        refused(lambda: Returns(None)(x), "module Returns.forward returned None")
        refused(lambda: Returns(np.ones(2))(x), "returned a float64 array of shape [2]")
        refused(lambda: nn.Sequential(nn.Linear(3, 3), Returns("y"))(x), "module Returns.forward returned str")
        class Raises(nn.Module):
            def forward(self, x):
                raise ArithmeticError("no forward today")
        e = refused(lambda: nn.Sequential(Raises())(x), "no forward today", error=ArithmeticError)
    """)


def test_sparsifiers_criteria_and_callbacks_that_return_bad_values_are_refused_naming_them():
    run_isolated("""
        import sys
        sys.path.insert(0, ".")
        from conftest import tiny_job
        x = np.ones((2, 2), np.float32)
        for name, result, pattern in [("none_mask", None, "keep_mask returned None"),
                                      ("ragged_mask", [[True], [False, True]], "keep_mask returned list"),
                                      ("int_mask", np.ones((2, 2), np.int64), "returned an array of int64")]:
            coppice.register_sparsifier(name, lambda result=result: (lambda x, ctx: result))
            refused(lambda: coppice.sparsifier(name).keep_mask(x), f"sparsifier {name}", pattern)
        refused(lambda: coppice.sparsifier("none_mask").keep_mask(x, ctx=3), "ctx must be a coppice.SparsifyContext")

        def sparse_model():
            coppice.manual_seed(0)
            model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
            rules = coppice.SparsityBuilder()
            rules.regex("0\\\\.weight").format("csr").sparsify("random", sparsity=0.8).density(0.2)
            model.apply_sparsity(rules, seed=1)
            return model

        def update_once(criterion):
            model = sparse_model()
            opt = optim.SGD(model.parameters(), lr=0.1)
            updater = optim.MaskUpdater(model, opt, end_step=10, interval=5, prune=criterion)
            updater.begin_step(0)
            loss = coppice.cross_entropy(model(np.ones((4, 8), np.float32)), np.zeros(4, np.int64))
            loss.backward()
            updater.after_backward()
            opt.step()
            updater.update(0)

        for name, result, pattern in [("none_scores", None, "returned None"),
                                      ("nan_scores", np.full((32, 8), np.nan), "a NaN score at flat index 0"),
                                      ("text_scores", "high", "returned a <U4 array"),
                                      ("ragged_scores", [[1.0], [2.0, 3.0]], "list, which is not an array")]:
            coppice.register_prune_criterion(name, lambda step, weight, values, result=result: result)
            refused(lambda: update_once(name), f"prune criterion '{name}' (Python)", pattern)

        job = tiny_job()
        refused(lambda: coppice.train(job, max_steps=5, callback=lambda step, loss: "yes"),
                "coppice.train: the callback returned str; it must return True or None")
        for answer in (None, True, np.bool_(True), 1):  # what goes on
            coppice.train(job, max_steps=3, callback=lambda step, loss, answer=answer: answer)
    """)


# ---- exceptions of callbacks: each thread gets its own --------------------------------------------------------


def test_exceptions_raised_in_callbacks_on_several_threads_come_back_on_their_own_thread():
    run_isolated("""
        import threading
        threads, rounds = 4, 25
        barrier = threading.Barrier(threads)

        def factory():
            def keep_mask(x, ctx):
                barrier.wait(timeout=30)  # every thread inside a callback at once
                raise LookupError(f"thread {threading.get_ident()}")
            return keep_mask

        coppice.register_sparsifier("per_thread", factory)
        s = coppice.sparsifier("per_thread")
        wrong = []

        def call():
            me = threading.get_ident()
            for _ in range(rounds):
                try:
                    s.keep_mask(np.ones((2, 2), np.float32))
                    wrong.append("no exception")
                except LookupError as e:
                    if str(e) != f"thread {me}":
                        wrong.append(f"thread {me} got {e}")
                except Exception as e:
                    wrong.append(f"thread {me} got {type(e).__name__}: {e}")

        ts = [threading.Thread(target=call) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not wrong, wrong[:5]
    """)
