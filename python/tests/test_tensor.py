"""coppice.Tensor: NumPy in and out without copies, formats and their parts, errors."""
import numpy as np
import pytest

import coppice


def test_numpy_round_trip_shares_memory():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = coppice.tensor(a)
    assert t.data_ptr() == a.ctypes.data  # in: no copy
    b = t.numpy()
    assert b.ctypes.data == a.ctypes.data  # out: no copy
    a[0, 0] = 42.0
    assert b[0, 0] == 42.0
    assert np.asarray(t).ctypes.data == a.ctypes.data  # the buffer protocol: no copy either
    del a, t
    assert b[0, 0] == 42.0  # the memory lives as long as a view of it


def test_strided_views_and_dtypes():
    a = np.arange(32, dtype=np.float64).reshape(4, 8)[:, ::2]  # strided: still no copy
    t = coppice.tensor(a)
    assert t.shape == [4, 4] and t.dtype == "f64"
    assert t.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a)
    for dt, name in [(np.float16, "f16"), (np.int32, "i32"), (np.int64, "i64"), (np.uint8, "u8"), (np.bool_, "bool")]:
        assert coppice.tensor(np.zeros(3, dt)).dtype == name
    reversed_view = np.arange(5, dtype=np.float32)[::-1]  # negative strides: copied
    np.testing.assert_array_equal(coppice.tensor(reversed_view).numpy(), reversed_view)


def test_formats_and_parts():
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((16, 32)).astype(np.float32)
    dense[np.abs(dense) < 1.0] = 0
    for fmt, opts in [("csr", {}), ("coo", {}), ("bsr", {"block_rows": 4, "block_cols": 4}), ("masked", {})]:
        s = coppice.tensor(dense).to_format(fmt, **opts)
        assert s.format == fmt
        np.testing.assert_array_equal(s.to_dense().numpy(), dense)
        assert all(isinstance(p, coppice.Tensor) for p in s.parts().values())
    csr = coppice.tensor(dense).to_format("csr")
    assert set(csr.parts()) == {"crow_indices", "col_indices", "values"}
    assert csr.nnz == int((dense != 0).sum())
    two_of_four = np.tile(np.array([True, False, True, False]), (16, 8))
    nm = coppice.sparse_from_mask(dense, two_of_four, "nm", n=2, m=4)
    assert nm.nnz == 16 * 32 // 2
    np.testing.assert_array_equal(nm.to_dense().numpy(), np.where(two_of_four, dense, 0))
    mask = np.abs(dense) > 1.5
    s = coppice.sparse_from_mask(dense, mask, "csr")
    np.testing.assert_array_equal(s.to_dense().numpy(), np.where(mask, dense, 0))
    x = rng.standard_normal((32, 8)).astype(np.float32)
    np.testing.assert_allclose(coppice.matmul(csr, x).numpy(), dense @ x, rtol=1e-5, atol=1e-5)


def test_errors_are_python_exceptions_with_the_message():
    with pytest.raises(coppice.Error, match=r"block shape \[4, 4\] does not divide the shape \[6, 6\]"):
        coppice.tensor(np.ones((6, 6), np.float32)).to_format("bsr", block_rows=4, block_cols=4)
    with pytest.raises(coppice.Error, match="to_dense"):
        coppice.tensor(np.ones((4, 4), np.float32)).to_format("csr").numpy()
    with pytest.raises(coppice.Error, match="coppice.tensor: data has NumPy dtype complex64"):
        coppice.tensor(np.zeros(3, np.complex64))


def test_dlpack_both_ways_without_copies():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = coppice.from_dlpack(a)  # NumPy's __dlpack__
    assert t.data_ptr() == a.ctypes.data and t.shape == [3, 4] and t.device == "cpu"
    b = np.from_dlpack(t)  # coppice.Tensor's __dlpack__ and __dlpack_device__
    assert b.ctypes.data == a.ctypes.data
    a[1, 1] = -1.0
    assert b[1, 1] == -1.0 and t.numpy()[1, 1] == -1.0
    strided = np.arange(20, dtype=np.int64).reshape(4, 5)[:, 1::2]
    s = coppice.from_dlpack(strided)
    assert s.data_ptr() == strided.ctypes.data
    np.testing.assert_array_equal(s.numpy(), strided)
    with pytest.raises(coppice.Error, match="dense tensor"):
        coppice.tensor(np.eye(4, dtype=np.float32)).to_format("csr").__dlpack__()
