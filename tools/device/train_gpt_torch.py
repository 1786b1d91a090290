#!/usr/bin/env python3
"""configs/gpt_dense.yaml trained by PyTorch alone, for a step count or a wall-clock budget: the peer of
configs/sweeps/gpt_equal_time.yaml's runs (issue 32's "dense PyTorch, torch.compile, for the same time").

    train_gpt_torch.py --corpus DIR [--steps N | --seconds S] [--compile default|none] [--seed K]
                       [--metrics PATH] [--device cuda|cpu] [--gelu erf|tanh] [--dim D --layers L --heads H
                       --context C --seq-len T --batch B]   (small models for a CPU check)
                       [--sparsify FORMAT:DENSITY[:BLOCK]]

The job, as the trainer runs it (train/job.cc, models/gpt.cc), with PyTorch's own pieces:
  model    eval_gpt_torch.py's GPT (beside this script): the same parameters, SDPA's causal attention, exact GELU
           (--gelu tanh: GPT-2's tanh approximation, F.gelu(approximate='tanh'), as a job with model.options.gelu
           tanh runs); token and position embeddings N(0, 0.02), Linear and LayerNorm PyTorch's defaults
           (Coppice's Linear uses the same Kaiming-uniform bounds)
  data     the corpus's bytes in windows of seq_len + 1 at stride seq_len; the last 1 % of the windows validate
           (as eval_gpt_torch.py reads them), the rest are shuffled every epoch (torch.randperm, seeded)
  update   AdamW (lr 6e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on every parameter), gradients clipped to
           norm 1.0, linear warm-up from 0 over 200 steps then cosine to 0 over the rest
  numerics f32 parameters, bf16 autocast (Coppice's bf16 with f32 master weights), logits' loss in f32
Not the same: the random numbers (init, shuffling), so losses agree with Coppice's in distribution, not bits.

--sparsify bsr:0.1:64 (or csr:0.1, nm:0.5): the four linears of every block (attn.qkv, attn.proj, mlp.fc1,
mlp.fc2) made coppice.torch SparseLinear layers at that density, keeping the largest entries or blocks at
initialisation (configs/gpt_bsr_static_90.yaml's static pattern; its block_rows set to BLOCK): Coppice's kernels
inside this PyTorch model, AdamW over the compact values. Needs the coppice package importable.

--seconds S: the step count is chosen at step 60 (inside the 200 warm-up steps, so no learning rate before it
depends on it) as S / the ms a step of steps 10-60, so the run takes about S seconds; time is measured from the
end of the first step, so torch.compile's compilation (printed) is left out, as the trainer's clock leaves out
its start-up. Evaluations: every steps/6 and at the end, 16 batches of 32 validation windows (the jobs'
evaluation.max_batches). Prints one JSON line at the end: steps, time_s (from the end of the first step),
first_step_s (the first step, compilation included), val_loss, ms_per_step, gelu.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_gpt_torch import GPT, read_corpus, tokenize  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(prog="train_gpt_torch.py", description=__doc__.split("\n")[0])
    p.add_argument("--corpus", required=True)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--seconds", type=float, default=None)
    p.add_argument("--compile", choices=["default", "none"], default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metrics", default=None)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--gelu", choices=["erf", "tanh"], default="erf",
                   help="the MLP's GELU, as the zoo's gelu option: erf (exact, the default) or tanh")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--sparsify", default=None, help="FORMAT:DENSITY[:BLOCK] through coppice.torch.sparsify_")
    a = p.parse_args(argv)
    if a.steps is None and a.seconds is None:
        a.steps = 3000
    if (a.steps is not None and a.steps < 61) or (a.seconds is not None and a.seconds <= 0):
        p.error("--steps must be at least 61 and --seconds positive")
    if a.sparsify is not None:
        parts = a.sparsify.split(":")
        try:
            a.sparsify = {"format": parts[0], "density": float(parts[1]), "block": int(parts[2]) if len(parts) > 2 else 32}
        except (IndexError, ValueError):
            p.error(f"--sparsify: expected FORMAT:DENSITY[:BLOCK] (bsr:0.1:64), got {a.sparsify!r}")
    if a.seq_len > a.context:
        p.error(f"--seq-len {a.seq_len} exceeds --context {a.context}")
    return a


def lr_at(step, total, base=6e-4, warmup=200):
    """train/job.cc WarmupFromZero + cosine_lr(total - warmup): the lr of optimizer step `step` (0-based)."""
    if step < warmup:
        return base * step / warmup
    t_max = max(1, total - warmup)
    return base * (1 + math.cos(math.pi * (step - warmup) / t_max)) / 2


def main(argv):
    a = parse_args(argv)
    dev = torch.device("cuda:0" if a.device == "cuda" else "cpu")
    torch.manual_seed(a.seed)
    text, _ = read_corpus(a.corpus, ".rst.txt")
    tokens = tokenize(text, "bytes", 256)
    t = a.seq_len
    size = (tokens.numel() - t - 1) // t + 1
    nv = int(math.floor(size * 0.01))
    train_n = size - nv
    offsets = torch.arange(t + 1)

    def batch_of(idx):
        rows = tokens[(idx * t).unsqueeze(1) + offsets]
        return rows[:, :-1].to(dev, non_blocking=True), rows[:, 1:].to(dev, non_blocking=True)

    opts = {"vocab_size": 256, "context": a.context, "dim": a.dim, "layers": a.layers, "heads": a.heads,
            "hidden": 4 * a.dim, "tie_weights": True, "gelu": a.gelu}
    model = GPT(opts, "sdpa")
    torch.nn.init.normal_(model.tok_embed.weight, std=0.02)
    torch.nn.init.normal_(model.pos_embed, std=0.02)
    model.to(dev)
    if a.sparsify:
        import coppice.torch as ct  # only when asked: tools/device/run_python_cuda.sh puts it on the path
        s = a.sparsify
        ct.sparsify_(model, [{"regex": r"blocks\.\d+\.(attn\.(qkv|proj)|mlp\.fc[12])", "format": s["format"],
                              "block": s["block"]}], density=s["density"], distribution="uniform")
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
                            **({"fused": True} if a.device == "cuda" else {}))
    fwd = torch.compile(model) if a.compile == "default" else model

    def loss_of(x, y, net):
        with torch.autocast(a.device, dtype=torch.bfloat16):
            logits = net(x)
        return F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))

    def evaluate():  # eager (no dropout in this model): no second compilation inside the clock
        total, count = 0.0, 0
        with torch.no_grad():
            for k in range(min(16, -(-nv // a.batch))):
                idx = torch.arange(train_n + k * a.batch, train_n + min((k + 1) * a.batch, nv))
                x, y = batch_of(idx)
                total += float(loss_of(x, y, model)) * y.numel()
                count += y.numel()
        return total / count

    metrics = open(a.metrics, "w") if a.metrics else None

    def record(r):
        if metrics:
            metrics.write(json.dumps(r) + "\n")
            metrics.flush()

    gen = torch.Generator().manual_seed(a.seed)
    order, pos = torch.randperm(train_n, generator=gen), 0
    total = a.steps if a.steps is not None else 10 ** 9
    every = max(1, total // 6) if a.steps is not None else None
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    start = t10 = None
    val = None
    step = 0
    begin = time.perf_counter()
    while step < total:
        if pos + a.batch > train_n:
            order, pos = torch.randperm(train_n, generator=gen), 0
        x, y = batch_of(order[pos:pos + a.batch])
        pos += a.batch
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total)
        loss = loss_of(x, y, fwd)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 1:  # the clock starts after the first step (compilation)
            sync()
            start = time.perf_counter()
            first_step_s = start - begin
        if step == 10:
            sync()
            t10 = time.perf_counter()
        if step == 60 and a.seconds is not None:
            sync()
            ms = 1000 * (time.perf_counter() - t10) / 50
            total = max(61, int(round(a.seconds * 1000 / ms)))
            every = max(1, total // 6)
            print(f"train_gpt_torch: {ms:.2f} ms a step: {total} steps for {a.seconds} s", file=sys.stderr)
        if step % 50 == 0 or step == total:
            record({"kind": "train", "step": step, "loss": float(loss.detach()), "time_s": time.perf_counter() - start})
        if every and (step % every == 0 or step == total):
            val = evaluate()
            record({"kind": "eval", "step": step, "val_loss": val, "time_s": time.perf_counter() - start})
            print(f"train_gpt_torch: step {step}: validation loss {val:.4f}", file=sys.stderr)
    sync()
    elapsed = time.perf_counter() - start
    print(json.dumps({"steps": step, "time_s": round(elapsed, 3), "compile": a.compile,
                      "first_step_s": round(first_step_s, 3), "val_loss": val,
                      "ms_per_step": round(1000 * elapsed / max(1, step - 1), 3), "gelu": a.gelu,
                      "sparsify": a.sparsify}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
