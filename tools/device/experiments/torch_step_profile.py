"""torch.profiler over torch_train.py's GPT step, dense and with coppice.torch
BSR 90 % (64x64), eager, bf16 autocast: the device time a step by kernel
(Coppice's kernels included: CUPTI sees every stream), the step's wall time,
and the same for the single-layer probe of torch_host_probe.py. Run as that
probe is run.
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "tools/bench")
import torch_train as tt  # noqa: E402


def kernel_table(prof, steps, top):
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name[:90]
            t, n = rows.get(name, (0.0, 0))
            rows[name] = (t + e.device_time, n + 1)
    total = sum(t for t, _ in rows.values())
    print(f"   kernel time a step: {total / steps / 1e3:.2f} ms over {sum(n for _, n in rows.values()) / steps:.0f} kernels")
    for name, (t, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"   {t / steps / 1e3:7.3f} ms  {n / steps:5.1f}x  {name}")


def cpu_table(prof, steps, top):
    ka = prof.key_averages()
    rows = sorted(ka, key=lambda e: -e.self_cpu_time_total)[:top]
    print(f"   host: top {top} by self CPU time a step")
    for e in rows:
        print(f"   {e.self_cpu_time_total / steps / 1e3:7.3f} ms self  {e.cpu_time_total / steps / 1e3:7.3f} ms total"
              f"  {e.count / steps:6.1f}x  {e.key[:80]}")


def gpt_step(fmt, compiled=False):
    """torch_train.py's GPT training step (SGD, bf16 autocast): dense, or with coppice.torch BSR 90 % 64x64."""
    args = tt.parse_args(["--models", "gpt", "--modes", "bf16", "--block", "64", "--sparsities", "0.9"])
    model, x, y, _ = tt.make_model("gpt", args, torch.device("cuda"))
    if fmt:
        tt.coppice_sparsify(model, "gpt", "coppice_bsr", 0.9, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    forward = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16):
            out = forward(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    return step


def gpt_case(fmt, compiled=False):
    step = gpt_step(fmt, compiled)
    for _ in range(4):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    print(f"== GPT {fmt or 'dense'}, {'compiled' if compiled else 'eager'}: {1e3 * (time.perf_counter() - t) / 10:.2f} ms a step (wall, 10 steps)")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    kernel_table(prof, 3, 45 if not compiled else 30)
    cpu_table(prof, 3, 30)


if __name__ == "__main__":
    for fmt, compiled in (("", False), ("bsr", False), ("bsr", True), ("", True)):
        gpt_case(fmt, compiled)
    from torch._dynamo.utils import counters
    print("dynamo graph breaks:", dict(counters["graph_break"]))
    print("dynamo stats:", dict(counters["stats"]))
