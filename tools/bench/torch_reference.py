#!/usr/bin/env python3
"""Runs the shapes of tools/bench (bench) through PyTorch and prints JSON in the same schema.

    torch_reference.py [gemm|elementwise|spmm|sddmm|bsr|attention|all] [--device cpu|cuda|all] [--size N]
                       [--numel N] [--reps R] [--warmup W] [--dtype f32,f64,bf16,f16] [--min-sample-ms X]
                       [--sdpa-backend flash|cudnn|default] [--json FILE]

Defaults, shapes and the timing method match the C++ bench: warm-up calls, then `reps` samples of
`inner` calls each (inner chosen so that a sample lasts at least min-sample-ms), the median per-call
time reported. CUDA samples are timed with CUDA events. spmm: W.to_sparse_csr() (and COO, and BSR
32x32 where torch runs it for f32; else "skipped") @ X; sddmm: torch.sparse.sampled_addmm into the CSR
pattern (other pattern formats skipped: torch has none); spmm on CUDA also times a 2:4 weight through
to_sparse_semi_structured (run_semi_structured), bench spmm's 2:4 rows. bsr (CUDA, not part of all): the forward
product of a BSR linear layer, F.linear(x [4096, 4096], W BSR [4096, 4096]) (PyTorch's Triton
bsr_dense_mm for bf16/f16), at blocks 16/32/64 and 90/95/98 %, beside dense F.linear of the same
dtype, as bench bsr's "linear" rows (tools/bench/bsr_bench.cc). attention (CUDA, not part of all):
self-attention through F.scaled_dot_product_attention in bf16 and f16 at [B, H, T, d] = [32, 16, 512, 64]
(the GPT job's), [8, 16, 2048, 64] and [16, 16, 1024, 128], forward alone and forward + backward: dense, causal
and not, through the flash kernel (formats "causal" and "full"; --sdpa-backend cudnn: cuDNN's fused attention
instead, default: whatever SDPA picks unrestricted), and two 64-token block masks, a causal local + strided one
and a non-causal window of a quarter of the blocks, through the efficient (or math) kernel (formats
"block_sparse" and "window"), the peers of a Coppice attention kernel (run_attention says how the rows are keyed
and their FLOPs counted). Shapes, sparsities and CPU defaults are the C++ bench's (tools/bench/spmm_bench.cc,
sddmm_bench.cc); the patterns are uniform with the same nnz but drawn by torch.randperm from a fixed seed, so not
the same positions. f32 matmul runs without TF32, and the
16-bit matmuls without reduced-precision reductions, as Coppice's cuBLAS gemm does.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import time

import torch

CPU_GEMM_SIZE = 1024
CUDA_GEMM_SIZE = 4096
ELEMENTWISE_NUMEL = 1 << 24
SPARSE_SIZE = 4096
CPU_SPARSE_BATCH = 256
CPU_SPARSE_REPS = 3
CPU_SPARSE_WARMUP = 1
LENET_BATCH = 256
SPARSITIES = [0.5, 0.75, 0.9, 0.95, 0.99]
BLOCK = 32

# --sdpa-backend: the kernel of the attention suite's dense rows, "causal" and "full" (dense_backends).
SDPA_CHOICES = ["flash", "cudnn", "default"]

DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16}
ALIASES = {"F32": "f32", "F64": "f64", "BF16": "bf16", "F16": "f16"}

# Datasheet peaks (dense; f64 and 16-bit on tensor cores, f32 without TF32); GB/s for bandwidth.
PEAKS = [  # (match, row name, f64, f32, f16/bf16 GFLOP/s, GB/s)
    (lambda n: "H200" in n and "NVL" in n, "H200 NVL", 60e3, 60e3, 835e3, 4800),
    (lambda n: "H200" in n, "H200 SXM", 67e3, 67e3, 989e3, 4800),
    (lambda n: "H100" in n and "PCIe" in n, "H100 PCIe", 51e3, 51e3, 756e3, 2000),
    (lambda n: "H100" in n and "NVL" in n, "H100 NVL", 60e3, 60e3, 835e3, 3900),
    (lambda n: "H100" in n, "H100 SXM5", 67e3, 67e3, 989e3, 3350),
]


def reference_peak(model, dtype, metric):
    for match, row, f64, f32, f16, gbps in PEAKS:
        if match(model):
            if metric == "gbps":
                return gbps, f"NVIDIA {row} datasheet (dense, HBM bandwidth)"
            value = {"f64": f64, "f32": f32, "bf16": f16, "f16": f16}.get(dtype)
            return value, f"NVIDIA {row} datasheet (dense; f64 and 16-bit on tensor cores, f32 without TF32)"
    return None, "unknown: no reference peak for this GPU model"


def cpu_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", nargs="?", default="all",
                   choices=["gemm", "elementwise", "spmm", "sddmm", "bsr", "attention", "all"])
    p.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--numel", type=int, default=0)
    p.add_argument("--reps", type=int, default=None)  # 20 (3 for the sparse suites on the CPU)
    p.add_argument("--warmup", type=int, default=None)  # 3 (1 for the sparse suites on the CPU)
    p.add_argument("--min-sample-ms", type=float, default=1.0)
    p.add_argument("--dtype", default="")
    p.add_argument("--sdpa-backend", default="flash", choices=SDPA_CHOICES,
                   help="the SDPA kernel of the attention suite's dense rows, \"causal\" and \"full\" (the "
                        "masked rows are unchanged): flash = sdpa_kernel(FLASH_ATTENTION), FlashAttention-2 "
                        "(default); cudnn = sdpa_kernel(CUDNN_ATTENTION), cuDNN's fused attention; default = no "
                        "sdpa_kernel at all, the kernel PyTorch picks itself. The rows' \"backend\" field names "
                        "the choice")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    a.reps_given, a.warmup_given = a.reps is not None, a.warmup is not None
    a.reps = 20 if a.reps is None else a.reps
    a.warmup = 3 if a.warmup is None else a.warmup
    if a.size < 0 or a.numel < 0 or a.reps < 1 or a.warmup < 0 or a.min_sample_ms < 0:
        p.error("sizes, reps and warm-up must be positive")
    a.dtypes = []
    for name in filter(None, a.dtype.split(",")):
        name = ALIASES.get(name, name)
        if name not in DTYPES:
            p.error(f"--dtype: unknown or non-floating dtype '{name}' (expected f32, f64, bf16, f16)")
        a.dtypes.append(name)
    # As in the C++ bench: with the elementwise suite alone, --size is its element count.
    if a.size and a.suite == "elementwise" and not a.numel:
        a.numel = a.size
    return a


def time_op(fn, device, warmup, reps, min_sample_ms, max_inner=1000):
    """Per-call milliseconds: (samples, inner)."""
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def sample(inner):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / inner
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        return (time.perf_counter() - t0) * 1e3 / inner

    for _ in range(warmup):
        fn()
    sync()
    once = sample(1)
    inner = 1
    if min_sample_ms > 0 and once < min_sample_ms:
        inner = max_inner if once <= 0 else min(math.ceil(min_sample_ms / once), max_inner)
    samples = []
    for _ in range(reps):
        sync()
        samples.append(sample(inner))
    return samples, inner


def make_result(suite, op, device_label, device_name, dtype, shape):
    return {
        "suite": suite, "op": op, "device": device_label, "device_name": device_name, "dtype": dtype,
        "shape": shape, "status": "ok", "median_ms": None, "min_ms": None, "max_ms": None,
    }


def finish(r, samples, inner, work, metric, peak, peak_source):
    r["median_ms"] = statistics.median(samples)
    r["min_ms"] = min(samples)
    r["max_ms"] = max(samples)
    throughput = work / (r["median_ms"] * 1e-3) / 1e9
    r[metric] = throughput
    r["peak_" + metric] = peak
    r["fraction_of_peak"] = throughput / peak if peak else None
    r["peak_source"] = peak_source
    r["reps"] = len(samples)
    r["inner"] = inner


def skipped(r, reason, metric, peak_source):
    r["status"] = reason
    r[metric] = None
    r["peak_" + metric] = None
    r["fraction_of_peak"] = None
    r["peak_source"] = peak_source
    r["reps"] = 0
    r["inner"] = 0


def devices(args):
    out = []
    if args.device in ("cpu", "all"):
        out.append("cpu")
    if args.device in ("cuda", "all"):
        out.append("cuda:0")
    return out


def device_info(label, dtype, metric):
    if label == "cpu":
        return cpu_model_name(), None, "unknown: the CPU peak is not estimated"
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    peak, source = reference_peak(name, dtype, metric)
    return name, peak, source


def run_case(r, label, dtype, metric, work, setup, args):
    name, peak, source = device_info(label, dtype, metric)
    r["device_name"] = name
    if label != "cpu" and not torch.cuda.is_available():
        skipped(r, "skipped: no CUDA device (none visible)", metric, source)
        return r
    try:
        device = torch.device(label)
        fn = setup(device)
        samples, inner = time_op(fn, device, args.warmup, args.reps, args.min_sample_ms)
        finish(r, samples, inner, work, metric, peak, source)
    except Skip as e:
        skipped(r, str(e), metric, source)
    except Exception as e:  # report, as the C++ bench does, and go on
        skipped(r, f"error: {type(e).__name__}: {e}", metric, source)
    return r


def run_gemm(args, results):
    for label in devices(args):
        dtypes = args.dtypes or (["f32", "f64", "bf16", "f16"] if label != "cpu" else ["f32", "f64"])
        n = args.size or (CUDA_GEMM_SIZE if label != "cpu" else CPU_GEMM_SIZE)
        for dtype in dtypes:
            def setup(device, dtype=dtype):
                a = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
                b = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
                return lambda: torch.matmul(a, b)
            r = make_result("gemm", "matmul", label, "", dtype, [n, n, n])
            results.append(run_case(r, label, dtype, "gflops", 2.0 * n ** 3, setup, args))
            log(results[-1])


def run_elementwise(args, results):
    numel = args.numel or ELEMENTWISE_NUMEL
    for label in devices(args):
        for dtype in args.dtypes or ["f32"]:
            itemsize = torch.tensor([], dtype=DTYPES[dtype]).element_size()

            def setup(device, dtype=dtype):
                a = torch.rand(numel, dtype=DTYPES[dtype], device=device)
                b = torch.rand(numel, dtype=DTYPES[dtype], device=device)
                return lambda: torch.add(a, b)
            r = make_result("elementwise", "add", label, "", dtype, [numel])
            results.append(run_case(r, label, dtype, "gbps", 3.0 * numel * itemsize, setup, args))
            log(results[-1])


def pattern_nnz(numel, sparsity):
    return min(max(round(numel * (1.0 - sparsity)), 0), numel)


def random_mask(rows, cols, sparsity, seed, device):
    """A uniformly random bool [rows, cols] mask with exactly pattern_nnz ones (fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    numel = rows * cols
    mask = torch.zeros(numel, dtype=torch.bool)
    mask[torch.randperm(numel, generator=g)[:pattern_nnz(numel, sparsity)]] = True
    return mask.view(rows, cols).to(device)


def random_block_mask(rows, cols, sparsity, seed, device):
    blocks = random_mask(rows // BLOCK, cols // BLOCK, sparsity, seed, "cpu")
    return blocks.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1).to(device)


def pattern_seed(sparsity):
    return 0xC0991CE + round(sparsity * 1000)


class Skip(Exception):
    pass


def sparse_args(args, label):
    """args with the CPU defaults of the sparse suites (fewer reps) unless given."""
    a = argparse.Namespace(**vars(args))
    if label == "cpu":
        if not args.reps_given:
            a.reps = CPU_SPARSE_REPS
        if not args.warmup_given:
            a.warmup = CPU_SPARSE_WARMUP
    return a


def run_sparse_suite(args, results, suite):
    for label in devices(args):
        a = sparse_args(args, label)
        big = args.size or SPARSE_SIZE
        small = args.size or (SPARSE_SIZE if label != "cpu" else CPU_SPARSE_BATCH)
        if suite == "spmm":  # (m, k, n): W [m, k] x X [k, n]; pattern [m, k]
            cases = [(big, big, small), (300, 784, LENET_BATCH), (100, 300, LENET_BATCH), (10, 100, LENET_BATCH)]
        else:  # (A [m, k] @ B [k, n]) at a pattern [m, n]
            cases = [(big, small, big), (300, LENET_BATCH, 784), (100, LENET_BATCH, 300), (10, LENET_BATCH, 100)]
        for m, k, n in cases:
            rows, cols = (m, k) if suite == "spmm" else (m, n)

            def dense_setup(device, m=m, k=k, n=n):
                x = torch.rand(m, k, device=device)
                y = torch.rand(k, n, device=device)
                return lambda: torch.matmul(x, y)
            r = make_result(suite, "dense_gemm", label, "", "f32", [m, k, n])
            r["format"] = "dense"
            results.append(run_case(r, label, "f32", "gflops", 2.0 * m * k * n, dense_setup, a))
            log(results[-1])
            for sparsity in SPARSITIES:
                for fmt in ("csr", "coo", "bsr"):
                    op = "matmul" if suite == "spmm" else "sddmm"
                    r = make_result(suite, op, label, "", "f32", [m, k, n])
                    r["format"] = fmt
                    r["sparsity"] = sparsity
                    blocked = fmt == "bsr"
                    if blocked and (rows % BLOCK or cols % BLOCK):
                        name, _, source = device_info(label, "f32", "gflops")
                        r["device_name"] = name
                        skipped(r, f"skipped: block {BLOCK}x{BLOCK} does not divide [{rows}, {cols}]", "gflops", source)
                        results.append(r)
                        log(r)
                        continue
                    if suite == "sddmm" and fmt != "csr":
                        name, _, source = device_info(label, "f32", "gflops")
                        r["device_name"] = name
                        skipped(r, "skipped: torch.sparse.sampled_addmm takes CSR only", "gflops", source)
                        results.append(r)
                        log(r)
                        continue
                    nnz = pattern_nnz((rows // BLOCK) * (cols // BLOCK), sparsity) * BLOCK * BLOCK if blocked \
                        else pattern_nnz(rows * cols, sparsity)
                    r["nnz"] = nnz
                    work = 2.0 * nnz * (n if suite == "spmm" else k)

                    def setup(device, m=m, k=k, n=n, rows=rows, cols=cols, sparsity=sparsity, fmt=fmt, blocked=blocked):
                        maker = random_block_mask if blocked else random_mask
                        mask = maker(rows, cols, sparsity, pattern_seed(sparsity), device)
                        dense = torch.rand(rows, cols, device=device) * mask
                        if fmt == "csr":
                            sp = dense.to_sparse_csr()
                        elif fmt == "coo":
                            sp = dense.to_sparse().coalesce()
                        else:
                            sp = dense.to_sparse_bsr((BLOCK, BLOCK))
                        if suite == "spmm":
                            x = torch.rand(k, n, device=device)
                            fn = lambda: torch.sparse.mm(sp, x) if fmt == "coo" else sp @ x
                        else:
                            a1 = torch.rand(m, k, device=device)
                            b1 = torch.rand(k, n, device=device)
                            fn = lambda: torch.sparse.sampled_addmm(sp, a1, b1, beta=0.0, alpha=1.0)
                        try:
                            fn()
                        except (RuntimeError, NotImplementedError) as e:
                            raise Skip(f"skipped: torch has no {fmt} kernel here ({type(e).__name__}: "
                                       f"{str(e).splitlines()[0][:160]})")
                        return fn
                    results.append(run_case(r, label, "f32", "gflops", work, setup, a))
                    log(results[-1])


def run_dense_linear(args, results, suite, dtype, n):
    """Dense F.linear of x [n, n] and W [n, n] on the GPU, the anchor of a sparse linear layer's rows: appends its
    row (op "dense_linear", format "dense") and returns its median ms (None where it did not run)."""
    label = "cuda:0"

    def setup(device):
        x = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
        w = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
        return lambda: torch.nn.functional.linear(x, w)
    r = make_result(suite, "dense_linear", label, "", dtype, [n, n, n])
    r["format"] = "dense"
    results.append(run_case(r, label, dtype, "gflops", 2.0 * n ** 3, setup, args))
    log(results[-1])
    return results[-1]["median_ms"]


def run_bsr(args, results):
    """F.linear with a BSR weight against dense F.linear, bench bsr's forward rows (CUDA only)."""
    label = "cuda:0"
    n = args.size or SPARSE_SIZE
    for dtype in args.dtypes or ["bf16", "f16"]:
        dense_ms = run_dense_linear(args, results, "bsr", dtype, n)
        for block in (16, 32, 64):
            for sparsity in (0.9, 0.95, 0.98):
                nnz = pattern_nnz((n // block) ** 2, sparsity) * block * block

                def setup(device, dtype=dtype, block=block, sparsity=sparsity):
                    blocks = random_mask(n // block, n // block, sparsity, pattern_seed(sparsity), "cpu")
                    mask = blocks.repeat_interleave(block, 0).repeat_interleave(block, 1).to(device)
                    w = (torch.rand(n, n, device=device) * mask).to(DTYPES[dtype]).to_sparse_bsr((block, block))
                    x = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
                    return lambda: torch.nn.functional.linear(x, w)
                r = make_result("bsr", "linear", label, "", dtype, [n, n, n])
                r.update(format="bsr", sparsity=sparsity, nnz=nnz, block=block)
                results.append(run_case(r, label, dtype, "gflops", 2.0 * nnz * n, setup, args))
                if r["status"] == "ok" and dense_ms:
                    r["dense_ms"] = dense_ms
                    r["speedup"] = dense_ms / r["median_ms"]
                    r["fraction_of_ideal"] = r["speedup"] * (1.0 - sparsity)
                log(results[-1])


def run_semi_structured(args, results):
    """2:4 through torch.sparse.to_sparse_semi_structured (cuSPARSELt, or CUTLASS where it runs) against dense
    F.linear: bench spmm's 2:4 rows "linear" (y = x W^T) and "linear_dx" (dx = dy W), bf16 and f16 (CUDA only)."""
    label = "cuda:0"
    if label not in devices(args):
        return
    n = args.size or SPARSE_SIZE
    for dtype in [d for d in (args.dtypes or ["bf16", "f16"]) if d in ("bf16", "f16")]:
        dense_ms = run_dense_linear(args, results, "spmm", dtype, n)
        for op in ("linear", "linear_dx"):
            def setup(device, dtype=dtype, op=op):
                try:
                    from torch.sparse import to_sparse_semi_structured
                except ImportError as e:
                    raise Skip(f"skipped: torch {torch.__version__} has no to_sparse_semi_structured ({e})")
                mask = torch.tensor([1, 1, 0, 0], dtype=torch.bool, device=device).tile(n, n // 4)
                w = (torch.rand(n, n, device=device) * mask).to(DTYPES[dtype])
                if op == "linear":
                    ws = to_sparse_semi_structured(w)
                    x = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
                    return lambda: torch.nn.functional.linear(x, ws)
                # dy @ W = (W^T @ dy^T)^T with W^T compressed (its pattern is 2:4 along the other dimension only
                # where transposable; this one keeps rows, so W^T is compressed from a transposed pattern).
                wts = to_sparse_semi_structured(w)
                dy = torch.rand(n, n, dtype=DTYPES[dtype], device=device)
                return lambda: torch.mm(wts, dy.t()).t()
            r = make_result("spmm", op, label, "", dtype, [n, n, n])
            r.update(format="nm", sparsity=0.5, nnz=n * n // 2, backend="to_sparse_semi_structured")
            results.append(run_case(r, label, dtype, "gflops", float(n) ** 3, setup, args))
            if r["status"] == "ok" and dense_ms:
                r["dense_ms"] = dense_ms
                r["speedup"] = dense_ms / r["median_ms"]
                r["fraction_of_ideal"] = r["speedup"] * 0.5
            log(results[-1])


# ---- attention ---------------------------------------------------------------------------------------------------

# [B, H, T, d]: the GPT job's (batch 32, 16 heads of 64 over 512 tokens), a long sequence, and wide heads.
ATTENTION_SHAPES = [(32, 16, 512, 64), (8, 16, 2048, 64), (16, 16, 1024, 128)]
ATTENTION_BLOCK = 64  # tokens per block of the block-sparse mask


def attention_block_mask(blocks):
    """bool [blocks, blocks]: query block i sees key block j iff j <= i and (i - j < 2 or (j + 1) % 4 == 0):
    itself and the block before (local), and every fourth block before it (strided)."""
    i = torch.arange(blocks).view(-1, 1)
    j = torch.arange(blocks).view(1, -1)
    return (j <= i) & ((i - j < 2) | ((j + 1) % 4 == 0))


def attention_window_mask(blocks):
    """bool [blocks, blocks], not causal: query block i sees itself and the blocks / 4 - 1 key blocks before it,
    wrapping around ((i - j) mod blocks < blocks / 4): a quarter of every row and column, 75 % sparse."""
    i = torch.arange(blocks).view(-1, 1)
    j = torch.arange(blocks).view(1, -1)
    return (i - j) % blocks < blocks // 4


def attention_flops(b, h, d, pairs):
    """Forward FLOPs of attention over `pairs` (query, key) pairs per head: QK^T and PV, 2 * 2 * d each."""
    return 4.0 * b * h * pairs * d


def sdpa_backends():
    """(sdpa_kernel, SDPBackend), or a Skip naming what this torch lacks."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        raise Skip(f"skipped: torch.nn.attention.sdpa_kernel is not in torch {torch.__version__} ({e})")
    return sdpa_kernel, SDPBackend


def dense_backends(sdp_backend, choice):
    """attention_case's (name, backend) choices for the dense rows ("causal", "full") under --sdpa-backend
    `choice`: flash -> [("flash", FLASH_ATTENTION)], cudnn -> [("cudnn", CUDNN_ATTENTION)], default ->
    [("default", None)] (None: no sdpa_kernel restriction, the kernel PyTorch picks). Where this torch's
    SDPBackend has no CUDNN_ATTENTION, the cudnn choice's backend is a Skip saying so (its rows are skipped with
    that reason)."""
    if choice == "flash":
        return [("flash", sdp_backend.FLASH_ATTENTION)]
    if choice == "cudnn":
        cudnn = getattr(sdp_backend, "CUDNN_ATTENTION", None)
        if cudnn is None:
            cudnn = Skip(f"skipped: torch {torch.__version__} has no SDPBackend.CUDNN_ATTENTION")
        return [("cudnn", cudnn)]
    if choice == "default":
        return [("default", None)]
    raise ValueError(f"--sdpa-backend: unknown choice '{choice}' (expected {', '.join(SDPA_CHOICES)})")


def attention_case(args, results, op, dtype, shape, fmt, choices, work, extra, make_fn):
    """One attention row: run_case with SDPA restricted to one backend while the op is set up and timed (entered
    once around it, not per call, so the small shapes do not time the context manager). `choices` are
    (name, SDPBackend) tried in order: a backend that refuses the case (setup's Skip) passes it to the next; the
    row records the backend that ran ("backend") and the refusals before it ("refused"). A None backend enters no
    sdpa_kernel: SDPA picks its kernel itself (--sdpa-backend default); a Skip (a backend this torch lacks) is a
    refusal with that reason, without a run."""
    label = "cuda:0"
    sdpa_kernel, _ = sdpa_backends()
    refused = []
    for i, (name, backend) in enumerate(choices):
        r = make_result("attention", op, label, "", dtype, list(shape))
        r["format"] = fmt
        r.update(extra)
        r["backend"] = name
        if not torch.cuda.is_available():
            run_case(r, label, dtype, "gflops", work, make_fn, args)  # says that there is no device
            break
        if isinstance(backend, Skip):
            device_name, _, source = device_info(label, dtype, "gflops")
            r["device_name"] = device_name
            skipped(r, str(backend), "gflops", source)
        else:
            with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                run_case(r, label, dtype, "gflops", work, make_fn, args)
        if refused:
            r["refused"] = "; ".join(refused)
        if not r["status"].startswith("skipped") or i + 1 == len(choices):
            break
        refused.append(f"{name}: {r['status']}")
        torch.cuda.empty_cache()
    if r["status"] == "ok":
        r["tflops"] = r["gflops"] / 1e3
    results.append(r)
    log(r)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_attention(args, results):
    """Attention through F.scaled_dot_product_attention (CUDA only), four kinds of rows per shape [B, H, T, d]
    (ATTENTION_SHAPES; q, k, v [B, H, T, d] of torch.randn in the dtype, the default scale 1/sqrt(d)), the rows
    of tools/bench/attention_bench.cc:

      format "causal"        is_causal=True under the kernel --sdpa-backend names (dense_backends; the row's
                             "backend" says which): flash (the default), sdpa_kernel(SDPBackend.FLASH_ATTENTION),
                             FlashAttention-2; cudnn, sdpa_kernel(SDPBackend.CUDNN_ATTENTION), cuDNN's fused
                             attention; either that kernel or a skipped row saying why it refused or is not in
                             this torch (never a silent fallback to another kernel); default, no sdpa_kernel at
                             all: the kernel SDPA picks itself (which one is not recorded). Work
                             counts the (query, key) pairs seen: forward 4 * B * H * T (T + 1) / 2 * d FLOPs.
      format "full"          the same without a mask (is_causal=False): every query sees every key, T^2 pairs.
      format "block_sparse"  a boolean attn_mask [T, T] (broadcast over B and H) made of 64-token blocks:
                             attention_block_mask (local + strided: query block i sees key block j iff j <= i
                             and (i - j < 2 or (j + 1) % 4 == 0)), causal inside the kept blocks as Coppice's,
                             under sdpa_kernel(EFFICIENT_ATTENTION), or MATH where that refuses the case (flash
                             takes no mask; the row's "backend" says which ran, "refused" why the other did not):
                             the peer of a Coppice block-sparse kernel, whose dense-masked cost it shows.
      format "window"        the same for attention_window_mask, not causal (a quarter of the blocks, 75 %).

    The masked rows' work counts only the pairs seen: forward 4 * B * H * pairs * d. Their extra fields: block
    (64), sparsity (the fraction of the (T/64)^2 blocks left out), nnz (kept (query, key) pairs per head),
    density_vs_dense (kept pairs / the pairs of their dense peer, "causal" or "full").

    A Coppice attention row compares (tools/bench/compare.py) when it has the same suite "attention", op, device
    type, dtype, shape [B, H, T, d], format and, for the masked formats, sparsity (rounded to 4 digits: 1 - kept
    blocks / all blocks of this mask), and its throughput in "gflops" counted the same way; compare.py also puts
    each masked Coppice row beside the dense row of its causality here, by time (issue 31's block-sparse target).

    Ops: attention_fwd, the forward alone (inputs without requires_grad, so no graph is kept), and
    attention_fwd_bwd, forward then backward (torch.autograd.grad of the output against a fixed random gradient
    into q, k and v, so no .grad accumulates between calls); its work counts the backward as 2.5 times the
    forward: 3.5 times the forward's FLOPs in all. gflops is that work over the median call; tflops the same in
    TFLOP/s; peak_gflops the datasheet's dense 16-bit tensor-core peak. Default dtypes bf16 and f16 (--dtype
    picks others; the flash and cudnn rows then say the kernel refused them). Timing as every suite here
    (time_op)."""
    label = "cuda:0"
    dtypes = args.dtypes or ["bf16", "f16"]
    formats = ("causal", "block_sparse", "full", "window")
    try:
        _, backend = sdpa_backends()
    except Skip as e:
        for dtype in dtypes:
            for shape in ATTENTION_SHAPES:
                for op in ("attention_fwd", "attention_fwd_bwd"):
                    for fmt in formats:
                        r = make_result("attention", op, label, "", dtype, list(shape))
                        r["format"] = fmt
                        skipped(r, str(e), "gflops", device_info(label, dtype, "gflops")[2])
                        results.append(r)
                        log(r)
        return
    dense_choices = dense_backends(backend, args.sdpa_backend)
    masked_backends = [("efficient", backend.EFFICIENT_ATTENTION), ("math", backend.MATH)]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    for dtype in dtypes:
        for b, h, t, d in ATTENTION_SHAPES:
            shape = (b, h, t, d)
            nblk = t // ATTENTION_BLOCK
            lower = torch.ones(t, t, dtype=torch.bool).tril()
            # format: (causal, block mask or None for a dense row)
            layouts = {"causal": (True, None), "block_sparse": (True, attention_block_mask(nblk)),
                       "full": (False, None), "window": (False, attention_window_mask(nblk))}

            def inputs(device, grad, dtype=dtype, shape=shape):
                g = torch.Generator(device=device).manual_seed(0xA77E)
                q, k, v = (torch.randn(*shape, generator=g, device=device, dtype=DTYPES[dtype]).requires_grad_(grad)
                           for _ in range(3))
                return q, k, v, g

            def setup(device, backward, causal, element_mask):
                q, k, v, g = inputs(device, backward)
                attn_mask = None if element_mask is None else element_mask.to(device)

                def forward():
                    if attn_mask is None:
                        return sdpa(q, k, v, is_causal=causal)
                    return sdpa(q, k, v, attn_mask=attn_mask)

                if backward:
                    grad_out = torch.randn(q.shape, generator=g, device=device, dtype=q.dtype)

                    def fn():
                        return torch.autograd.grad(forward(), (q, k, v), grad_out)
                else:
                    fn = forward
                try:
                    fn()
                    torch.cuda.synchronize(device)
                except (RuntimeError, NotImplementedError) as e:
                    first = str(e).splitlines()[0][:200] if str(e) else ""
                    raise Skip(f"skipped: the SDPA backend refused it ({type(e).__name__}: {first})")
                return fn

            for fmt in formats:
                causal, block_mask = layouts[fmt]
                dense_pairs = t * (t + 1) / 2 if causal else t * t
                element_mask, extra, pairs = None, {}, dense_pairs
                if block_mask is not None:
                    # Causal layouts are causal inside their kept blocks too: a diagonal block holds 64 * 65 / 2 pairs.
                    element_mask = (block_mask.repeat_interleave(ATTENTION_BLOCK, 0)
                                    .repeat_interleave(ATTENTION_BLOCK, 1))
                    if causal:
                        element_mask = element_mask & lower
                    pairs = int(element_mask.sum())
                    extra = {"block": ATTENTION_BLOCK, "sparsity": 1.0 - int(block_mask.sum()) / float(nblk * nblk),
                             "nnz": pairs, "density_vs_dense": pairs / dense_pairs}
                choices = dense_choices if block_mask is None else masked_backends
                for op, backward, factor in (("attention_fwd", False, 1.0), ("attention_fwd_bwd", True, 3.5)):
                    attention_case(args, results, op, dtype, shape, fmt, choices,
                                   factor * attention_flops(b, h, d, pairs), extra,
                                   lambda device, backward=backward, causal=causal, element_mask=element_mask:
                                   setup(device, backward, causal, element_mask))


def log(r):
    shape = "[" + ", ".join(map(str, r["shape"])) + "]"
    if r.get("format"):
        shape += " " + r["format"]
    if r.get("sparsity") is not None:
        shape += f" {100 * r['sparsity']:g}%"
    if r["status"] != "ok":
        print(f"{r['suite']:<11} {r['device']:<6} {r['dtype']:<4} {shape:<20} {r['status']}", file=sys.stderr)
        return
    metric = "gflops" if "gflops" in r else "gbps"
    unit = "GFLOP/s" if metric == "gflops" else "GB/s"
    line = f"{r['suite']:<11} {r['device']:<6} {r['dtype']:<4} {shape:<20} {r['median_ms']:10.4f} ms  {r[metric]:10.1f} {unit}"
    if r.get("fraction_of_peak"):
        line += f"  ({100 * r['fraction_of_peak']:.1f}% of peak)"
    print(line, file=sys.stderr)


def main(argv):
    args = parse_args(argv)
    # Same numerics as Coppice's CUDA gemm: plain f32, f32 accumulation for 16-bit types.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    results = []
    if args.suite in ("gemm", "all"):
        run_gemm(args, results)
    if args.suite in ("elementwise", "all"):
        run_elementwise(args, results)
    if args.suite in ("spmm", "all"):
        run_sparse_suite(args, results, "spmm")
        run_semi_structured(args, results)
    if args.suite in ("sddmm", "all"):
        run_sparse_suite(args, results, "sddmm")
    if args.suite == "bsr":
        run_bsr(args, results)
    if args.suite == "attention":
        run_attention(args, results)
    report = {
        "tool": "torch-reference",
        "torch_version": torch.__version__,
        "cpu_name": cpu_model_name(),
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
        "settings": "allow_tf32=False, fp16/bf16 reduced-precision reduction off",
        "schema_version": 1,
        "cuda_device_count": torch.cuda.device_count(),
        "cpu_threads": torch.get_num_threads(),
        "warmup": args.warmup,
        "min_sample_ms": args.min_sample_ms,
        "results": results,
    }
    return write_report(report, args.json)


def write_report(report, json_path):
    """Prints the report as one JSON line (and writes it to json_path if given); the exit status:
    1 if any result is an error (torch_ddp.py reports the same way)."""
    text = json.dumps(report, indent=None, separators=(", ", ": "))
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            f.write(text + "\n")
    return 1 if any(r["status"].startswith("error") for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
