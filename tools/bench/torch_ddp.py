#!/usr/bin/env python3
"""The job of `bench dp` (tools/bench/dp_bench.cc) in PyTorch: the peer for data-parallel training.

    torch_ddp.py [--device cuda|cpu] [--gpus 1,2] [--variants dense,masked] [--batch B] [--hidden H]
                 [--steps S] [--warmup W] [--sparsity X] [--timeout-s T] [--json FILE]

The model is an MLP H-H-H-H-10 (nn.Linear with ReLU between, as Coppice's MLP), f32 with TF32 off,
cross-entropy, SGD (lr 0.01, momentum 0.9); every rank trains on its own fixed random batch of B examples
(weak scaling). Variants:

  dense   every weight dense
  masked  the three HxH weights multiplied by a fixed random mask at --sparsity in forward (how masked
          sparse training is done in PyTorch: the weight and its gradient stay dense)

On 1 GPU it runs in this process with no process group and no DDP (the honest baseline); on N > 1 it
spawns N ranks with torch.multiprocessing (MASTER_ADDR 127.0.0.1, a free port), each on cuda:<rank>,
wrapped in DistributedDataParallel (NCCL, bucket_cap_mb 25; gloo with --device cpu). A step: zero grads,
forward, backward (DDP all-reduces every gradient, overlapped), optimizer step; warm-up steps, then
--steps steps each timed on its own with the device synchronized; the median is reported, and the slowest
rank's median. Bytes per step per rank for DDP: the sum of the parameters' bytes (it all-reduces every
gradient, masked or not); 0 on one GPU.

Defaults match bench dp: H 4096 and B 1024 on CUDA (256 and 64 on the CPU), 20 timed steps after 5
warm-up steps, sparsity 0.9. The JSON has bench's record format (suite "dp", op the variant, plus
world_size, samples_per_s, exchange_bytes_per_step, ...); tools/bench/dp_compare.py puts it beside
Coppice's. NCCL_NVLS_ENABLE is set to 0 unless already set (the lent machines need it off).
"""
import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402  (beside this file, here and in .devbin/)
from torch_reference import cpu_model_name, pattern_nnz, random_mask  # noqa: E402

CLASSES = 10
MODEL_SEED = 20261122
MASK_SEED = 0xC0991CE
DATA_SEED = 0xDA7A



def reference_peak(model):
    """The f32 datasheet peak (no TF32) of a GPU model, as torch_reference.py has it."""
    return torch_reference.reference_peak(model, "f32", "flops")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--gpus", default="1,2", help="world sizes to run, comma-separated (ranks on the CPU with --device cpu)")
    p.add_argument("--variants", default="dense,masked")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--sparsity", type=float, default=0.9)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    try:
        a.worlds = [int(w) for w in a.gpus.split(",") if w]
    except ValueError:
        p.error(f"--gpus: expected integers, got '{a.gpus}'")
    if not a.worlds or any(w < 1 for w in a.worlds):
        p.error("--gpus: world sizes must be at least 1")
    a.variants = [v for v in a.variants.split(",") if v]
    for v in a.variants:
        if v not in ("dense", "masked"):
            p.error(f"--variants: unknown variant '{v}' (expected dense, masked)")
    cuda = a.device == "cuda"
    a.batch = a.batch or (1024 if cuda else 64)
    a.hidden = a.hidden or (4096 if cuda else 256)
    if a.batch < 1 or a.hidden < 1 or a.steps < 1 or a.warmup < 0 or not 0 <= a.sparsity < 1:
        p.error("batch, hidden and steps must be positive, warmup >= 0, sparsity in [0, 1)")
    return a


def set_numerics():
    # Plain f32 matmuls, as Coppice's cuBLAS gemm runs them.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


class MaskedLinear(nn.Linear):
    """nn.Linear whose weight is multiplied by a fixed mask in forward (the gradient is masked with it)."""

    def __init__(self, in_features, out_features, mask):
        super().__init__(in_features, out_features)
        self.mask = mask  # a plain attribute, not a buffer: DDP has nothing to broadcast per step

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


def make_model(hidden, variant, sparsity, device):
    torch.manual_seed(MODEL_SEED)  # every rank builds the same model (DDP broadcasts rank 0's anyway)
    layers = []
    stored = 0
    for i in range(3):
        if variant == "masked":
            mask = random_mask(hidden, hidden, sparsity, MASK_SEED + i, device).to(torch.float32)
            layers.append(MaskedLinear(hidden, hidden, mask))
            stored += pattern_nnz(hidden * hidden, sparsity) + hidden
        else:
            layers.append(nn.Linear(hidden, hidden))
            stored += hidden * hidden + hidden
        layers.append(nn.ReLU())
    layers.append(nn.Linear(hidden, CLASSES))
    stored += hidden * CLASSES + CLASSES
    return nn.Sequential(*layers).to(device), stored


def run_variant(args, variant, rank, world, device):
    """Times one variant on this rank; returns the record (rank 0's is reported)."""
    cuda = device.type == "cuda"
    model, stored = make_model(args.hidden, variant, args.sparsity, device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if cuda else None, bucket_cap_mb=25, broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(DATA_SEED + rank)
    x = torch.randn(args.batch, args.hidden, generator=g).to(device)
    y = torch.randint(0, CLASSES, (args.batch,), generator=g).to(device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        last["loss"] = loss

    for _ in range(args.warmup):
        step()
    sync()
    samples = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(samples)
    slowest = med
    if world > 1:
        t = torch.tensor([med], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        slowest = float(t.item())
    name = torch.cuda.get_device_name(device) if cuda else cpu_model_name()
    peak, source = reference_peak(name) if cuda else (None, "unknown: the CPU peak is not estimated")
    flops = 6.0 * args.batch * stored
    gflops = flops / (med * 1e-3) / 1e9
    r = {
        "suite": "dp", "op": variant, "device": f"cuda:{device.index}" if cuda else "cpu", "device_name": name,
        "dtype": "f32", "shape": [args.batch, args.hidden, args.hidden, args.hidden, args.hidden, CLASSES],
        "format": "masked" if variant == "masked" else "dense",
    }
    if variant == "masked":
        r["sparsity"] = args.sparsity
        r["nnz"] = 3 * pattern_nnz(args.hidden * args.hidden, args.sparsity)
    r.update({
        "status": "ok", "median_ms": med, "min_ms": min(samples), "max_ms": max(samples), "gflops": gflops,
        "peak_gflops": peak, "fraction_of_peak": gflops / peak if peak else None, "peak_source": source,
        "reps": len(samples), "inner": 1, "world_size": world, "batch_per_rank": args.batch,
        "slowest_rank_median_ms": slowest, "samples_per_s": world * args.batch / (slowest * 1e-3),
        "exchange_bytes_per_step": param_bytes if world > 1 else 0, "param_bytes_dense": param_bytes,
        "param_bytes_stored": 4 * stored, "final_loss": float(last["loss"].item()),
        "ddp": world > 1,
    })
    return r


def error_record(args, variant, world, status):
    r = {
        "suite": "dp", "op": variant, "device": "cuda:0" if args.device == "cuda" else "cpu", "device_name": "",
        "dtype": "f32", "shape": [args.batch, args.hidden, args.hidden, args.hidden, args.hidden, CLASSES],
        "format": "masked" if variant == "masked" else "dense",
    }
    if variant == "masked":
        r["sparsity"] = args.sparsity
    r.update({"status": status, "median_ms": None, "min_ms": None, "max_ms": None, "gflops": None,
              "peak_gflops": None, "fraction_of_peak": None, "peak_source": "", "reps": 0, "inner": 0,
              "world_size": world, "batch_per_rank": args.batch})
    return r


def run_all_variants(args, rank, world, device):
    out = []
    for variant in args.variants:
        try:
            out.append(run_variant(args, variant, rank, world, device))
        except Exception as e:  # report, as the C++ bench does, and go on
            traceback.print_exc()
            out.append(error_record(args, variant, world, f"error: rank {rank}: {type(e).__name__}: {e}"))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def worker(rank, world, port, args, out_path):
    """One spawned rank of a DDP run; rank 0 writes its records to out_path."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    set_numerics()
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        records = run_all_variants(args, rank, world, device)
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump(records, f)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(args, world):
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        return [error_record(args, v, world, "skipped: no CUDA device (none visible)") for v in args.variants]
    if cuda and torch.cuda.device_count() < world:
        return [error_record(args, v, world, f"skipped: {world} GPUs asked for, {torch.cuda.device_count()} visible")
                for v in args.variants]
    if world == 1:  # no process group, no DDP
        set_numerics()
        return run_all_variants(args, 0, 1, torch.device("cuda:0" if cuda else "cpu"))
    fd, out_path = tempfile.mkstemp(prefix="torch_ddp_", suffix=".json")
    os.close(fd)
    try:
        mp.spawn(worker, args=(world, free_port(), args, out_path), nprocs=world, join=True)
        with open(out_path) as f:
            return json.load(f)
    except Exception as e:
        msg = str(e).strip().splitlines()
        return [error_record(args, v, world, f"error: {type(e).__name__}: {msg[-1] if msg else ''}"[:400])
                for v in args.variants]
    finally:
        os.unlink(out_path)


def log(r):
    if r["status"] != "ok":
        print(f"dp torch {r['op']:<7} world {r['world_size']}: {r['status']}", file=sys.stderr)
        return
    print(f"dp torch {r['op']:<7} world {r['world_size']}: {r['median_ms']:9.3f} ms (slowest rank "
          f"{r['slowest_rank_median_ms']:.3f}), {r['samples_per_s']:10.1f} samples/s, "
          f"{r['exchange_bytes_per_step']} bytes per step, loss {r['final_loss']:.4g}", file=sys.stderr)


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    except Exception:
        return ""


def main(argv):
    args = parse_args(argv)
    set_numerics()
    results = []
    for world in args.worlds:
        for r in run_world(args, world):
            log(r)
            results.append(r)
    cuda_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    report = {
        "tool": "torch-ddp",
        "torch_version": torch.__version__,
        "nccl_version": nccl_version(),
        "cpu_name": cpu_model_name(),
        "gpu_name": cuda_name,
        "settings": f"allow_tf32=False, DDP bucket_cap_mb=25, NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}",
        "schema_version": 1,
        "cuda_device_count": torch.cuda.device_count(),
        "cpu_threads": torch.get_num_threads(),
        "warmup": args.warmup,
        "results": results,
    }
    return torch_reference.write_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
