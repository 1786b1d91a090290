#!/usr/bin/env python3
"""The job of `bench dp` (tools/bench/dp_bench.cc) in PyTorch: the peer for data-parallel training.

    torch_ddp.py [--device cuda|cpu] [--model mlp|gpt] [--gpus 1,2] [--variants dense,masked] [--batch B]
                 [--hidden H] [--steps S] [--warmup W] [--sparsity X] [--timeout-s T] [--json FILE]

--model mlp (the default): an MLP H-H-H-H-10 (nn.Linear with ReLU between, as Coppice's MLP), f32 with TF32
off, cross-entropy, SGD (lr 0.01, momentum 0.9); every rank trains on its own fixed random batch of B examples
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

--model gpt: the peer of the trainer's data-parallel configs/gpt_dense.yaml. Every rank trains the GPT of
torch_train.py --models gpt (class GPT, imported from torch_train.py beside this file: vocab 256, context 512,
dim 1024, 8 pre-norm blocks of 16 heads, MLP 4096 with exact GELU, causal SDPA, tied token embedding; on the
CPU torch_train.py's tiny one: context 64, dim 64, 2 layers, 4 heads) on B sequences of 512 random byte tokens
(B 32, as the job's batch_size; 4 of 64 on the CPU) with random byte targets, from a fixed seed per rank; f32
parameters under torch.autocast(bfloat16), the mean cross-entropy over every position, gradients clipped to
norm 1.0 (after DDP's all-reduce), AdamW (lr 6e-4 constant, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on
every parameter; PyTorch's default implementation). The same spawning, DDP, step and timing as the MLP; only
the dense variant runs (--variants masked is refused), and --hidden does not apply. Records: op "gpt_dense", dtype
"bf16", shape [B, T], plus tokens_per_s and seq_len; gflops counts 6 x tokens x the matmul weights (the
blocks' linears and the tied logits) plus 6 x B x layers x T^2 x dim for causal attention, against the bf16
datasheet peak.

Defaults match bench dp: H 4096 and B 1024 on CUDA (256 and 64 on the CPU), 20 timed steps after 5
warm-up steps, sparsity 0.9. The JSON has bench's record format (suite "dp", op the variant or gpt_dense, plus
world_size, samples_per_s, exchange_bytes_per_step, ...); tools/bench/dp_compare.py puts it beside
Coppice's (its "dense" and "masked" rows; gpt_dense rows are read by tools/device/run_dp_timeline.sh).
NCCL_NVLS_ENABLE is set to 0 unless already set (the lent machines need it off).
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



def reference_peak(model, dtype="f32"):
    """The datasheet peak of a GPU model for dtype (f32: without TF32; bf16: tensor cores, dense), as
    torch_reference.py has it."""
    return torch_reference.reference_peak(model, dtype, "flops")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--model", default="mlp", choices=["mlp", "gpt"],
                   help="mlp (bench dp's job, the default) or gpt (configs/gpt_dense.yaml's model, dense only)")
    p.add_argument("--gpus", default="1,2", help="world sizes to run, comma-separated (ranks on the CPU with --device cpu)")
    p.add_argument("--variants", default=None, help="dense,masked for mlp (the default); dense alone for gpt")
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
    gpt = a.model == "gpt"
    a.variants = [v for v in (a.variants or ("dense" if gpt else "dense,masked")).split(",") if v]
    for v in a.variants:
        if v not in ("dense", "masked"):
            p.error(f"--variants: unknown variant '{v}' (expected dense, masked)")
    if gpt and a.variants != ["dense"]:
        p.error(f"--model gpt: only the dense variant is measured (got --variants {','.join(a.variants)}); "
                "masked is the MLP's")
    if gpt and a.hidden:
        p.error("--hidden is the MLP's width; --model gpt has configs/gpt_dense.yaml's sizes")
    cuda = a.device == "cuda"
    if gpt:
        a.gpt = gpt_config(cuda)
        a.batch = a.batch or a.gpt["batch"]
        a.hidden = a.gpt["dim"]
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


def torch_train():
    """torch_train.py (beside this file), imported only for --model gpt: the MLP path runs without it, as it does
    from a .devbin/ that holds this file and torch_reference.py alone."""
    import torch_train as tt  # noqa: E402
    return tt


def gpt_config(cuda):
    """torch_train.py's GPT sizes: configs/gpt_dense.yaml's on CUDA, its tiny one on the CPU."""
    tt = torch_train()
    return dict(tt.GPT_CUDA if cuda else tt.GPT_CPU)


# ---- what differs per model: the model, the data, the optimizer, the loss; the rest is shared -----------------

class MLPJob:
    """bench dp's job: the MLP (dense or masked), f32, SGD, a random batch of B examples of H features."""

    dtype = "f32"
    grad_clip = None

    def __init__(self, args):
        self.args = args

    def op(self, variant):
        return variant

    def shape(self):
        return [self.args.batch, self.args.hidden, self.args.hidden, self.args.hidden, self.args.hidden, CLASSES]

    def model(self, variant, device):
        """(model on device, parameters stored: the masked weights' kept entries only)."""
        return make_model(self.args.hidden, variant, self.args.sparsity, device)

    def optimizer(self, params):
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def data(self, rank, device):
        g = torch.Generator(device="cpu").manual_seed(DATA_SEED + rank)
        x = torch.randn(self.args.batch, self.args.hidden, generator=g).to(device)
        y = torch.randint(0, CLASSES, (self.args.batch,), generator=g).to(device)
        return x, y

    def loss(self, model, x, y):
        return F.cross_entropy(model(x), y)

    def flops(self, stored):
        return 6.0 * self.args.batch * stored

    def extra(self, med, slowest, world):
        return {}


class GPTJob:
    """configs/gpt_dense.yaml's step: torch_train.py's GPT, bf16 autocast over f32 parameters, AdamW, clipping."""

    dtype = "bf16"
    grad_clip = 1.0

    def __init__(self, args):
        self.args = args
        self.c = args.gpt

    def op(self, variant):
        return "gpt_" + variant

    def shape(self):
        return [self.args.batch, self.c["seq"]]

    def model(self, variant, device):
        c = self.c
        torch.manual_seed(MODEL_SEED)  # every rank builds the same model (DDP broadcasts rank 0's anyway)
        model = torch_train().GPT(c["vocab_size"], c["context"], c["dim"], c["layers"], c["heads"], c["mlp_ratio"])
        return model.to(device), sum(p.numel() for p in model.parameters())

    def optimizer(self, params):
        return torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1)

    def data(self, rank, device):
        g = torch.Generator(device="cpu").manual_seed(DATA_SEED + rank)
        shape = (self.args.batch, self.c["seq"])
        x = torch.randint(0, self.c["vocab_size"], shape, generator=g).to(device)
        y = torch.randint(0, self.c["vocab_size"], shape, generator=g).to(device)
        return x, y

    def loss(self, model, x, y):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = model(x)  # [N, T, vocab]: every position counts
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def flops(self, stored):
        c, b, t = self.c, self.args.batch, self.c["seq"]
        d, hidden = c["dim"], c["mlp_ratio"] * c["dim"]
        matmul_weights = c["layers"] * (4 * d * d + 2 * d * hidden) + c["vocab_size"] * d  # qkv, proj, fc1, fc2; logits
        return 6.0 * b * t * matmul_weights + 6.0 * b * c["layers"] * t * t * d  # + causal QK^T and AV

    def extra(self, med, slowest, world):
        t = self.c["seq"]
        return {"seq_len": t, "tokens_per_s": world * self.args.batch * t / (slowest * 1e-3),
                "optimizer": "adamw", "grad_clip": self.grad_clip}


JOBS = {"mlp": MLPJob, "gpt": GPTJob}


def record_head(args, job, variant, device, device_name):
    r = {
        "suite": "dp", "op": job.op(variant), "device": device, "device_name": device_name,
        "dtype": job.dtype, "shape": job.shape(), "format": "masked" if variant == "masked" else "dense",
    }
    if variant == "masked":
        r["sparsity"] = args.sparsity
    return r


def run_variant(args, variant, rank, world, device):
    """Times one variant on this rank; returns the record (rank 0's is reported)."""
    cuda = device.type == "cuda"
    job = JOBS[args.model](args)
    model, stored = job.model(variant, device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if cuda else None, bucket_cap_mb=25, broadcast_buffers=False)
    params = list(model.parameters())
    opt = job.optimizer(params)
    x, y = job.data(rank, device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = job.loss(model, x, y)
        loss.backward()
        if job.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, job.grad_clip)
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
    peak, source = reference_peak(name, job.dtype) if cuda else (None, "unknown: the CPU peak is not estimated")
    gflops = job.flops(stored) / (med * 1e-3) / 1e9
    r = record_head(args, job, variant, f"cuda:{device.index}" if cuda else "cpu", name)
    if variant == "masked":
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
    r.update(job.extra(med, slowest, world))
    return r


def error_record(args, variant, world, status):
    r = record_head(args, JOBS[args.model](args), variant, "cuda:0" if args.device == "cuda" else "cpu", "")
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
          f"{r['exchange_bytes_per_step']} bytes per step, loss {r['final_loss']:.4g}"
          + (f", {r['tokens_per_s']:.0f} tokens/s" if "tokens_per_s" in r else ""), file=sys.stderr)


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
        "settings": f"allow_tf32=False, DDP bucket_cap_mb=25, NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}"
                    + (", gpt: bf16 autocast over f32 parameters, AdamW lr 6e-4 weight_decay 0.1, grad clip 1.0"
                       if args.model == "gpt" else ""),
        "schema_version": 1,
        "cuda_device_count": torch.cuda.device_count(),
        "cpu_threads": torch.get_num_threads(),
        "warmup": args.warmup,
        "results": results,
    }
    return torch_reference.write_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
