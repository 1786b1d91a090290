"""Where coppice.torch's sparse linear spends the host's time, by function, on a GPU.

The lent machines have no perf, so tools/device/host_sampler.cc samples the
process's call stacks (SIGPROF) while one layer's C++ calls run in a loop:
a 64-token bf16 batch through a 1024 x 1024 BSR 90 % (64x64) layer keeps the
GPU ahead of the host, so the samples are the host's cost of the calls.
HOST_SAMPLE_CALLS sets the calls sampled (default 4000; the kernel's timer
gives about 180 samples a second of CPU time). Then, on this machine,
tools/device/host_profile.py names the functions:

    python3 tools/device/experiments/torch_host_sample.py SAMPLER.so OUT_DIR
    tools/device/host_profile.py OUT_DIR/forward.samples --module _coppice...so=UNSTRIPPED.so
"""
import ctypes
import os
import sys
import time

import torch

from coppice.torch import SparseLinear
from coppice.torch import functional as F_

sampler = ctypes.CDLL(sys.argv[1])
sampler.host_sampler_stop.restype = ctypes.c_long
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
dev = "cuda"
torch.manual_seed(0)
lin = torch.nn.Linear(1024, 1024, device=dev)
sl = SparseLinear.from_dense(lin, "bsr", 0.1, block=64)
x = torch.randn(64, 1024, device=dev)
p = sl.pattern()
dy = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16)
_, xb, vb = F_._forward(x, sl.values.detach(), sl.bias.detach(), p, torch.bfloat16)
cases = {
    "forward": lambda: F_._forward(x, sl.values.detach(), sl.bias.detach(), p, torch.bfloat16),
    "backward": lambda: F_._backward(dy, xb, vb, p, True, True, True, (torch.float32,) * 3),
}
for name, fn in cases.items():
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    n = int(os.environ.get("HOST_SAMPLE_CALLS", 4000))
    t = time.perf_counter()
    sampler.host_sampler_start(ctypes.c_int(2000))
    for _ in range(n):
        fn()
    got = sampler.host_sampler_stop(os.path.join(out, f"{name}.samples").encode())
    host = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    print(f"{name}: {1e6 * host:.1f} us a call (host), {got} samples")
