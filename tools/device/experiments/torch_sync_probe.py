"""Does a coppice.torch call wait for the GPU? torch_train.py's GPT with
coppice.torch BSR 90 % (64x64), eager: the host time of each one-call kernel
(coppice.kernels.sparse_linear_forward/_backward) by layer shape, as the step
runs and with the GPU drained before each call (a call that synchronizes
costs far more in the first), and the CUDA API calls torch.profiler saw.
"""
import collections
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import coppice

sys.path.insert(0, "tools/bench")
import torch_train as tt  # noqa: E402

spent = collections.defaultdict(float)
calls = collections.Counter()
drain = [False]
real = {name: getattr(coppice.kernels, name) for name in ("sparse_linear_forward", "sparse_linear_backward")}


def wrap(name):
    def wrapper(*args, **kwargs):
        if drain[0]:
            torch.cuda.synchronize()
        key = f"{name} {list(args[2].shape) if name.endswith('forward') else list(args[3].shape)}"
        t = time.perf_counter()
        out = real[name](*args, **kwargs)
        spent[key] += time.perf_counter() - t
        calls[key] += 1
        return out
    return wrapper


for name in real:
    setattr(coppice.kernels, name, wrap(name))

args = tt.parse_args(["--models", "gpt", "--modes", "bf16", "--block", "64", "--sparsities", "0.9"])
model, x, y, _ = tt.make_model("gpt", args, torch.device("cuda"))
tt.coppice_sparsify(model, "gpt", "coppice_bsr", 0.9, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", torch.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()


for mode in (False, True, False):
    drain[0] = mode
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    spent.clear()
    calls.clear()
    t = time.perf_counter()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    print(f"== {'GPU drained before each call' if mode else 'as the step runs'}: "
          f"{1e3 * (time.perf_counter() - t) / 5:.2f} ms a step")
    for k in sorted(spent):
        print(f"   {k:50s} {1e6 * spent[k] / calls[k]:8.1f} us a call ({calls[k] / 5:.0f} a step)")

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(2):
        step()
    torch.cuda.synchronize()
print("== CUDA API calls a step (torch.profiler)")
for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total):
    if e.key.startswith("cu") and not e.key.startswith("cudnn"):
        print(f"   {e.self_cpu_time_total / 2 / 1e3:7.3f} ms  {e.count / 2:6.1f}x  {e.key}")
