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
from torch.profiler import ProfilerActivity, profile

import coppice

sys.path.insert(0, "tools/device/experiments")
from torch_step_profile import gpt_step  # noqa: E402

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

step = gpt_step("bsr")


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
