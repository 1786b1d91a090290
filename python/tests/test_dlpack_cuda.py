"""A CUDA PyTorch tensor into Coppice and back through DLPack without a copy, and Coppice computing on it in place.

Runs where PyTorch and a GPU are: on the lent GPU machine through tools/device/pack_python.sh and run_python_cuda.sh
(the module built for that machine's Python); skipped elsewhere, saying why. Also runs as a plain script (that
machine has no pytest).
"""
import sys

try:
    import pytest
except ImportError:  # the device's Python may lack pytest: __main__ below runs the checks
    pytest = None

import coppice


def _torch_on_cuda():
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not installed ({e})"
    if not torch.cuda.is_available():
        return None, "no CUDA device"
    return torch, ""


def check_cuda_round_trip(torch):
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t = coppice.from_dlpack(x)  # torch's __dlpack__
    assert t.data_ptr() == x.data_ptr(), (t.data_ptr(), x.data_ptr())
    assert t.device.startswith("cuda") and t.shape == [3, 4], (t.device, t.shape)
    y = torch.from_dlpack(t)  # coppice.Tensor's __dlpack__ and __dlpack_device__
    assert y.data_ptr() == x.data_ptr() and y.device == x.device
    x[1, 2] = -5.0
    assert y[1, 2].item() == -5.0
    # Coppice's CUDA kernels read the shared memory: a product computed by Coppice equals torch's.
    w = torch.randn(4, 5, device="cuda")
    z = torch.from_dlpack(coppice.matmul(t, coppice.from_dlpack(w)))
    assert z.device == x.device
    torch.testing.assert_close(z, x @ w, rtol=1e-5, atol=1e-5)
    # A strided view passes as it is.
    v = x.t()
    tv = coppice.from_dlpack(v)
    assert tv.data_ptr() == v.data_ptr() and tv.shape == [4, 3]
    torch.testing.assert_close(torch.from_dlpack(tv), v)


def test_cuda_tensor_round_trips_without_copy():
    torch, why = _torch_on_cuda()
    if torch is None:
        pytest.skip(why)
    check_cuda_round_trip(torch)


if __name__ == "__main__":
    torch, why = _torch_on_cuda()
    if torch is None:
        print(f"skipped: {why}")
        sys.exit(0)
    check_cuda_round_trip(torch)
    print(f"dlpack cuda: passed (torch {torch.__version__}, {torch.cuda.get_device_name(0)})")
