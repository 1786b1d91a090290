"""Host time of coppice.torch's sparse linear, piece by piece, on a GPU.

A 64-token bf16 batch through one 1024 x 1024 BSR 90 % (64x64) layer keeps
the GPU ahead of the host, so each figure is the host's cost of a call.
Also times two ways of giving torch.compile an opaque op with a trivial
body: torch.library.custom_op with register_autograd (what functional.py
does), and a torch.library.Library op without autograd of its own, called
from an autograd.Function that dynamo traces. Run with the package of
pack_python.sh on PYTHONPATH:

    python3 tools/device/experiments/torch_host_probe.py
"""
import cProfile
import io
import pstats
import time

import torch

import coppice
from coppice.torch import SparseLinear
from coppice.torch import functional as F_
from coppice.torch._exchange import coppice_stream, to_coppice, to_torch

dev = "cuda"
torch.manual_seed(0)


def bench(name, fn, n=400):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    print(f"{name:58s} {1e6 * host:8.1f} us")


def fwd_bwd(m, x):
    def f():
        with torch.autocast("cuda", torch.bfloat16):
            y = m(x)
        y.float().sum().backward()
    return f


lin = torch.nn.Linear(1024, 1024, device=dev)
sl = SparseLinear.from_dense(lin, "bsr", 0.1, block=64)
x = torch.randn(64, 1024, device=dev, requires_grad=True)
print("== eager, autocast bf16, [64, 1024] through 1024 x 1024")
bench("nn.Linear fwd", lambda: lin(x).sum())
bench("nn.Linear fwd+bwd", fwd_bwd(lin, x))
bench("SparseLinear fwd", lambda: sl(x).sum())
bench("SparseLinear fwd+bwd", fwd_bwd(sl, x))

xb = x.detach().bfloat16()
vb = sl.values.detach().bfloat16()
bb = sl.bias.detach().bfloat16()
p = sl.pattern()
w = coppice.kernels.with_values(p, to_coppice(vb))
dy = torch.ones(64, 1024, device=dev, dtype=torch.bfloat16)
print("== pieces")
bench("torch.cuda.current_stream", lambda: torch.cuda.current_stream(x.device))


def stream_only():
    with coppice_stream(x.device):
        pass


bench("coppice_stream enter+exit", stream_only)
bench("pattern()", sl.pattern)
bench("values.to(bf16)", lambda: sl.values.to(torch.bfloat16))
bench("to_coppice", lambda: to_coppice(vb))
bench("with_values", lambda: coppice.kernels.with_values(p, to_coppice(vb)))
bench("kernels.linear (bias)", lambda: coppice.kernels.linear(to_coppice(xb), w, to_coppice(bb)))
bench("kernels.linear (no bias)", lambda: coppice.kernels.linear(to_coppice(xb), w, None))
y = coppice.kernels.linear(to_coppice(xb), w, None)
bench("to_torch", lambda: to_torch(y))
bench("_forward", lambda: F_._forward(x, sl.values, sl.bias, p, torch.bfloat16))
bench("kernels.linear_backward (dx, dvalues)",
      lambda: coppice.kernels.linear_backward(to_coppice(dy), to_coppice(xb), w, True, True))
bench("_backward", lambda: F_._backward(dy, xb, vb, p, True, True, True, (torch.float32,) * 3))


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g


bench("autograd.Function identity fwd+bwd", lambda: Identity.apply(x).sum().backward())

print("== cProfile of SparseLinear fwd+bwd (200 calls), by own time")
pr = cProfile.Profile()
f = fwd_bwd(sl, x)
pr.enable()
for _ in range(200):
    f()
pr.disable()
torch.cuda.synchronize()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue())

# ---- two registrations of an opaque op, trivial bodies ------------------------------------------------------
print("== opaque ops, trivial bodies (empty_like), f+b of op(x).sum()")


@torch.library.custom_op("probe::with_autograd", mutates_args=())
def op_a(t: torch.Tensor, key: int) -> torch.Tensor:
    return torch.empty_like(t)


@op_a.register_fake
def _(t, key):
    return torch.empty_like(t)


@torch.library.custom_op("probe::with_autograd_bwd", mutates_args=())
def op_a_bwd(g: torch.Tensor, key: int) -> torch.Tensor:
    return torch.empty_like(g)


@op_a_bwd.register_fake
def _(g, key):
    return torch.empty_like(g)


def _a_setup(ctx, inputs, output):
    ctx.key = inputs[1]


op_a.register_autograd(lambda ctx, g: (torch.ops.probe.with_autograd_bwd(g, ctx.key), None), setup_context=_a_setup)

lib = torch.library.Library("probe", "FRAGMENT")
lib.define("bare(Tensor t, int key) -> Tensor")
lib.define("bare_bwd(Tensor g, int key) -> Tensor")
for name in ("bare", "bare_bwd"):
    lib.impl(name, lambda t, key: torch.empty_like(t), "CUDA")
    lib.impl(name, lambda t, key: torch.empty_like(t), "CPU")
    torch.library.register_fake(f"probe::{name}", lambda t, key: torch.empty_like(t), lib=lib)


class Bare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, key):
        ctx.key = key
        return torch.ops.probe.bare(t, key)

    @staticmethod
    def backward(ctx, g):
        return torch.ops.probe.bare_bwd(g, ctx.key), None


def a_step():
    torch.ops.probe.with_autograd(x, 7).sum().backward()


def b_step():
    Bare.apply(x, 7).sum().backward()


bench("custom_op + register_autograd, eager", a_step)
bench("Library op in autograd.Function, eager", b_step)
bench("torch.ops.probe.bare alone", lambda: torch.ops.probe.bare(x, 7))
bench("torch.ops.probe.with_autograd alone (no grad)", lambda: torch.ops.probe.with_autograd(x.detach(), 7))


def chain(op_step):
    def f(t):
        for _ in range(8):
            t = op_step(t)
        return t.sum()
    return f


for name, one in (("custom_op", lambda t: torch.ops.probe.with_autograd(t, 7)), ("Library+Function", lambda t: Bare.apply(t, 7))):
    try:
        c = torch.compile(chain(one))
        bench(f"compiled: 8 x {name} f+b", lambda: c(x).backward(), n=200)
        e = chain(one)
        bench(f"eager: 8 x {name} f+b", lambda: e(x).backward(), n=200)
    except Exception as e:  # noqa: BLE001 (a probe: say what failed and go on)
        print(f"compiled {name}: {type(e).__name__}: {str(e)[:400]}")

print("== compiled SparseLinear (real body), fwd+bwd")
csl = torch.compile(sl)
bench("compiled SparseLinear fwd+bwd", fwd_bwd(csl, x), n=200)
