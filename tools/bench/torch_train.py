#!/usr/bin/env python3
"""The models of `bench train` (tools/bench/train_bench.cc) in PyTorch: the peer for training steps.

    torch_train.py [--device cuda|cpu] [--models mlp,lenet300,vit,gpt] [--formats dense,csr,bsr,nm]
                   [--modes f32,tf32,bf16] [--hidden H] [--batch B] [--block N] [--steps S] [--warmup W]
                   [--compile MODE[,MODE...]] [--cuda-graph] [--gelu erf|tanh] [--json FILE]

Models, as bench train builds them:
  mlp       nn.Linear H-H-H-H-10 with ReLU between, batch B (H 4096, B 4096 on CUDA; 256 and 64 on the CPU);
            masked: the three HxH weights
  lenet300  LeNet-300-100 (784-300-100-10, ReLU), batch 128 (configs/lenet300_rigl_90.yaml); masked: fc1..fc3
  vit       configs/vit_sparse_attention.yaml's ViT (28x28x1 images, 7x7 patches, a class token, dim 64, depth 2,
            4 heads, MLP 256 with exact (erf) GELU (--gelu), pre-norm blocks, block attention of 4 tokens with the
            class token global: it attends to and is attended by every token, as the zoo's vit makes it), batch 128;
            attention through F.scaled_dot_product_attention with that pattern as a boolean mask; masked:
            blocks.*.mlp.fc1/fc2
  gpt       the zoo's GPT decoder (byte-level LM of the Linux-doc jobs): vocab 256, context 512, dim 1024, 8 layers,
            16 heads, MLP 4 x dim with exact (erf) GELU (--gelu), pre-norm blocks (LayerNorm eps 1e-5), causal
            attention through F.scaled_dot_product_attention(is_causal=True) (so PyTorch takes its flash kernel in
            bf16), a final norm and logits through the tied token embedding; batch 32 sequences of 512 random token
            ids in [0, 256) with random targets, the loss the mean cross-entropy over every position. On the CPU a
            tiny one (context 64, dim 64, 2 layers, 4 heads, batch 4 of 64). Parameter names are the
            checkpoint's (tok_embed.weight, pos_embed, blocks.{i}.ln1/attn.qkv/attn.proj/ln2/mlp.fc1/mlp.fc2,
            norm; tools/device/eval_gpt_torch.py builds the same model). Masked: the four linear weights of every
            block (attn.qkv, attn.proj, mlp.fc1, mlp.fc2); embeddings, norms and biases stay dense. Not in the
            default --models (its 24 cases would not fit run_train_bench.sh's time limit): ask for it by name.
  gpt_moe   configs/gpt_moe.yaml's model: the gpt with every block's MLP a mixture of 8 experts of 4 x dim units,
            top-1 (models/moe.h): a bias-free router, the gate the router's probability, each expert run on the
            tokens routed to it by a loop over the experts (index, two matmuls, index_add: the straightforward
            PyTorch MoE; --moe-impl grouped: the tokens sorted by expert and each layer one torch._grouped_mm),
            and the load-balancing loss (8 * sum f_e P_e * 0.01) added to the loss; dense only.

Variants: dense, and "masked" for each sparse format of the C++ side at the same sparsity and pattern kind
(uniform random for csr, block-uniform random 32x32 blocks (--block N: NxN; or the largest power of two up to N
dividing the weight) for bsr, 2 random of every 4 along a row for nm): the weight stays a dense nn.Parameter,
multiplied by a fixed mask in forward (so its gradient is masked too), and the mask is reapplied to the weight
after every optimizer step so that it stays sparse. That is how masked sparse training is done in PyTorch (DEVICE.md).
coppice_csr, coppice_bsr, coppice_nm: the same slots as coppice.torch SparseLinear layers (sparsify_, the same
kind of random pattern), so Coppice's kernels run inside this PyTorch model and its optimizer trains the compact
values; records have format "coppice.torch" and the pattern without the prefix. The coppice package must be
importable (tools/device/run_python_cuda.sh installs it on the GPU machine).

--gelu erf|tanh: the GELU of the vit's and gpt's MLPs: erf (the default), F.gelu, the exact GELU the zoo's models
run by default; tanh, F.gelu(approximate='tanh'), GPT-2's approximation, what bench train --gelu tanh runs (the
job's model.options.gelu: tanh). Their records are then named "<model>+gelu_tanh", as bench train names its rows,
so that train_compare.py puts each beside the Coppice step with the same activation.

--compile MODE[,MODE...]: each case also under torch.compile (inductor) in each named mode (default,
reduce-overhead, max-autotune, max-autotune-no-cudagraphs), after its eager run: the model's forward (and so
its backward) compiled, the SGD step and the mask reapplication eager as in the eager case. The record is the
eager one's with "compile" set to the mode and "compile_s" the wall time of the first warm-up step (tracing,
compiling and autotuning; kept out of the step times). Eager records carry "compile": null.
torch.compile is the peer for transformer steps (../shared/DEVICE.md): train_compare.py puts a compiled dense
step beside each row when the JSON has one.

--cuda-graph: each CUDA case also with its whole step (forward, loss, backward, the SGD step and the mask
reapplication) captured once in a CUDA graph (torch.cuda.graph, after warm-up steps on a side stream, as PyTorch's
documentation captures a whole network) and replayed: the step without Python, dispatch or launch costs on the
host. Eager, and under each --compile mode that makes no CUDA graphs of its own (default,
max-autotune-no-cudagraphs). coppice_* variants record Coppice's kernels into the same graph (coppice.torch joins
PyTorch's capture). Records carry "cuda_graph": true (false otherwise); a model whose step cannot be captured
(gpt_moe: its routing reads back to the host) gets an error row.

Modes: f32 (TF32 off), tf32 (torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 on), bf16 (f32
parameters, forward and backward under torch.autocast(dtype=torch.bfloat16)).

A step: zero grads (set to none), forward, cross-entropy (over [N, classes] logits; gpt's [N, T, vocab] logits
flattened to [N * T, vocab]), backward, SGD (lr 0.01, momentum 0.9), and for masked variants the mask reapplied.
SGD for every model, gpt included, because bench train (tools/bench/train_bench.cc) steps every model with the
same SGD so that both sides run the same update; the GPT jobs themselves train with AdamW (lr 3e-4, weight
decay 0.1), whose step costs a few more elementwise passes over the parameters but the same matmuls. Warm-up
steps, then each step timed on its own with CUDA events (the CPU clock on the CPU). Reported: the median step,
training_state_bytes (parameters + gradients + momentum buffers after the last step, each tensor once; the masks
of masked variants are not counted), peak_memory_bytes (CUDA: torch.cuda.max_memory_allocated over the timed
steps, including activations); gpt also tokens_per_s, and bsr rows their mask block. The JSON has bench's record
format (suite "train", op the model, dtype the mode, format "dense" or "masked", "pattern" the C++ format it
stands beside); tools/bench/train_compare.py puts it beside Coppice's.
"""
import argparse
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import BLOCK, cpu_model_name, random_mask, write_report  # noqa: E402  (beside this file, here and in .devbin/)

CLASSES = 10
MODEL_SEED = 20261122
MASK_SEED = 0xC0991CE
DATA_SEED = 0xDA7A
MODELS = ["mlp", "lenet300", "vit", "gpt", "gpt_moe"]
DEFAULT_MODELS = ["mlp", "lenet300", "vit"]  # gpt only when asked for (its cases take minutes)
FORMATS = ["dense", "csr", "bsr", "nm", "coppice_csr", "coppice_bsr", "coppice_nm"]
MODES = ["f32", "tf32", "bf16"]
SPARSITIES = [0.9, 0.95, 0.98]
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
GRAPHLESS_COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")  # the others capture CUDA graphs themselves
JOB_BATCH = 128  # data.batch_size of lenet300_rigl_90.yaml and vit_sparse_attention.yaml
# The GPT jobs' model (the zoo's gpt defaults) and batch; on the CPU a tiny one that runs in seconds.
GPT_CUDA = dict(vocab_size=256, context=512, dim=1024, layers=8, heads=16, mlp_ratio=4, batch=32, seq=512)
GPT_CPU = dict(vocab_size=256, context=64, dim=64, layers=2, heads=4, mlp_ratio=4, batch=4, seq=64)
# configs/gpt_moe.yaml's mixture of experts in every block (models/moe.h).
MOE = dict(experts=8, top_k=1, aux_loss=0.01)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--block", type=int, default=BLOCK, help="bsr mask block (a power of two; 32)")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--compile", default="", help="torch.compile modes to run each case under too (comma list)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="each CUDA case also with its whole step captured in a CUDA graph and replayed")
    p.add_argument("--gelu", default="erf", choices=["erf", "tanh"],
                   help="the vit's and gpt's GELU: erf (exact, the default) or tanh (F.gelu(approximate='tanh'))")
    p.add_argument("--sparsities", default=",".join(str(x) for x in SPARSITIES),
                   help="the csr and bsr variants' sparsities (comma list; default 0.9,0.95,0.98)")
    p.add_argument("--moe-impl", default="loop", choices=["loop", "grouped"],
                   help="gpt_moe's experts: a loop over them (default), or one torch._grouped_mm per layer over the "
                        "tokens sorted by expert (PyTorch >= 2.8, bf16 on sm_90; an error row where it does not run)")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    a.compile = [m for m in a.compile.split(",") if m]
    bad = [m for m in a.compile if m not in COMPILE_MODES]
    if bad:
        p.error(f"--compile: unknown modes {bad} (expected {', '.join(COMPILE_MODES)})")
    for flag, known in (("models", MODELS), ("formats", FORMATS), ("modes", MODES)):
        names = [n for n in getattr(a, flag).split(",") if n]
        bad = [n for n in names if n not in known]
        if bad or not names:
            p.error(f"--{flag}: unknown or no names {bad} (expected {', '.join(known)})")
        setattr(a, flag, names)
    try:
        a.sparsities = [float(x) for x in a.sparsities.split(",") if x]
    except ValueError:
        p.error(f"--sparsities: expected numbers, got {a.sparsities!r}")
    if not a.sparsities or any(not 0.0 < x < 1.0 for x in a.sparsities):
        p.error(f"--sparsities: each must be in (0, 1), got {a.sparsities}")
    cuda = a.device == "cuda"
    # bench train's defaults (tools/bench/bench_util.h, kTrain*).
    a.hidden = a.hidden or (4096 if cuda else 256)
    a.batch = a.batch or (4096 if cuda else 64)
    a.steps = a.steps or (10 if cuda else 3)
    a.warmup = a.warmup if a.warmup >= 0 else (3 if cuda else 1)
    if a.hidden < 1 or a.batch < 1 or a.steps < 1:
        p.error("hidden, batch and steps must be positive")
    if a.block < 1 or a.block & (a.block - 1):
        p.error(f"--block must be a power of two, got {a.block}")
    return a


def variants(formats, sparsities=SPARSITIES):
    """(pattern, sparsity) pairs: pattern None is dense."""
    out = []
    for f in formats:
        if f == "dense":
            out.append((None, None))
        elif f in ("csr", "bsr", "coppice_csr", "coppice_bsr"):
            out += [(f, s) for s in sparsities]
        elif f in ("nm", "coppice_nm"):
            out.append((f, 0.5))
    return out


# ---- masks -----------------------------------------------------------------------------------------------------

def bsr_block_for(rows, cols, wanted=BLOCK):
    """The largest power of two <= wanted dividing both (train_step_util.h's bsr_block_for)."""
    b = 1
    while b * 2 <= wanted and rows % (b * 2) == 0 and cols % (b * 2) == 0:
        b *= 2
    return b


def nm_mask(rows, cols, n, m, seed, device):
    g = torch.Generator().manual_seed(seed)
    order = torch.rand(rows, cols // m, m, generator=g).argsort(dim=-1)
    mask = torch.zeros(rows, cols // m, m, dtype=torch.bool)
    mask.scatter_(-1, order[..., :n], True)
    return mask.view(rows, cols).to(device)


def weight_mask(pattern, sparsity, rows, cols, seed, device, block=BLOCK):
    if pattern == "csr":
        return random_mask(rows, cols, sparsity, seed, device)
    if pattern == "bsr":
        b = bsr_block_for(rows, cols, block)
        blocks = random_mask(rows // b, cols // b, sparsity, seed, "cpu")
        return blocks.repeat_interleave(b, 0).repeat_interleave(b, 1).to(device)
    if pattern == "nm":
        return nm_mask(rows, cols, 2, 4, seed, device)
    raise ValueError(f"unknown pattern {pattern}")


class MaskedLinear(nn.Linear):
    """nn.Linear whose weight is multiplied by a fixed mask in forward; reapply() zeroes the masked weights."""

    def __init__(self, linear, mask):
        super().__init__(linear.in_features, linear.out_features, device=linear.weight.device)
        with torch.no_grad():
            self.weight.copy_(linear.weight * mask)
            self.bias.copy_(linear.bias)
        self.register_buffer("mask", mask.to(linear.weight.dtype), persistent=False)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)

    @torch.no_grad()
    def reapply(self):
        self.weight.mul_(self.mask)


# ---- models ----------------------------------------------------------------------------------------------------

class MLP(nn.Module):
    """fc1..fcN with ReLU between (models/zoo.h's MLP)."""

    def __init__(self, sizes):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, fc in enumerate(self.fcs):
            x = fc(x)
            if i + 1 < len(self.fcs):
                x = F.relu(x)
        return x

    def sparse_slots(self, count):
        return [(self.fcs, i) for i in range(count)]


GELU_APPROXIMATE = {"erf": "none", "tanh": "tanh"}  # --gelu -> F.gelu's approximate


class Block(nn.Module):
    """Pre-norm transformer block (models/attention.h's TransformerBlock): ln1, attn (qkv, proj), ln2, mlp."""

    def __init__(self, dim, heads, hidden, attn_mask, gelu="erf"):
        super().__init__()
        self.heads = heads
        self.approximate = GELU_APPROXIMATE[gelu]
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.ModuleList([nn.Linear(dim, hidden), nn.Linear(hidden, dim)])
        self.attn_mask = attn_mask

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=self.attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(n, t, d))
        return x + self.mlp[1](F.gelu(self.mlp[0](self.ln2(x)), approximate=self.approximate))


class ViT(nn.Module):
    """vit_sparse_attention.yaml's model: 7x7 patches of a 28x28x1 image, class token, 2 blocks, head on the token.

    Attention keeps the keys in the query's diagonal block of `block` tokens, and the class token (token 0) is
    global (AttentionPattern::global_tokens 1 in the zoo): row 0 and column 0 of the mask are all true.
    """

    def __init__(self, device, image=28, patch=7, dim=64, depth=2, heads=4, hidden=256, block=4, gelu="erf"):
        super().__init__()
        self.patch = patch
        tokens = (image // patch) ** 2 + 1
        self.patch_embed = nn.Linear(patch * patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        i = torch.arange(tokens)
        attn_mask = i[:, None] // block == i[None, :] // block  # keys in the query's diagonal block
        attn_mask |= (i[:, None] == 0) | (i[None, :] == 0)  # the class token attends and is attended globally
        attn_mask = attn_mask.to(device)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, attn_mask, gelu) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x):
        n, c, h, w = x.shape
        p = self.patch
        patches = x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(n, -1, c * p * p)
        x = torch.cat([self.cls_token.expand(n, -1, -1), self.patch_embed(patches)], dim=1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])

    def sparse_slots(self, count):
        return [(b.mlp, i) for b in self.blocks for i in range(2)]


class GPTAttention(nn.Module):
    """Causal multi-head self-attention: qkv [3D, D] viewed as [N, T, 3, H, D/H], SDPA, proj [D, D]."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(D/H); flash in bf16
        return self.proj(a.transpose(1, 2).reshape(n, t, d))


class GPTMLP(nn.Module):
    """fc1 [F, D], GELU (exact, erf; or with gelu "tanh" GPT-2's tanh approximation), fc2 [D, F]."""

    def __init__(self, dim, hidden, gelu="erf"):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.approximate = GELU_APPROXIMATE[gelu]

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class GPTMoE(nn.Module):
    """models/moe.h's mixture of experts, the straightforward PyTorch way: router [E, D] without bias, w1 and w2
    [E * F, D] (no biases), top-k gates (the router's probability for top-1; renormalized for k > 1), a loop over
    the experts on the tokens routed to each, and the load-balancing loss E * sum_e f_e P_e * aux_loss kept in
    self.aux for the step to add."""

    def __init__(self, dim, hidden, experts, top_k, aux_loss, gelu="erf"):
        super().__init__()
        self.experts, self.top_k, self.hidden, self.aux_weight = experts, top_k, hidden, aux_loss
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(experts * hidden, dim).uniform_(-dim ** -0.5, dim ** -0.5))
        self.w2 = nn.Parameter(torch.empty(experts * hidden, dim).uniform_(-hidden ** -0.5, hidden ** -0.5))
        self.approximate = GELU_APPROXIMATE[gelu]
        self.aux = None
        self.grouped = False  # --moe-impl grouped: torch._grouped_mm instead of the loop

    def forward(self, x):
        shape, d = x.shape, x.shape[-1]
        x2 = x.reshape(-1, d)
        probs = F.softmax(self.router(x2).float(), dim=-1)
        gates, idx = probs.topk(self.top_k, dim=-1)
        if self.top_k > 1:
            gates = gates / gates.sum(-1, keepdim=True)
        w1 = self.w1.view(self.experts, self.hidden, d)
        w2 = self.w2.view(self.experts, self.hidden, d)
        out = torch.zeros_like(x2)
        if self.grouped:
            # Every assignment sorted by expert, each layer one grouped GEMM over the groups.
            flat = idx.flatten()
            order = torch.argsort(flat, stable=True)
            offs = torch.cumsum(torch.bincount(flat, minlength=self.experts), 0).to(torch.int32)
            xs = x2[order // self.top_k].to(torch.bfloat16)
            h = F.gelu(torch._grouped_mm(xs, w1.transpose(1, 2).to(torch.bfloat16), offs=offs),
                       approximate=self.approximate)
            ys = torch._grouped_mm(h, w2.to(torch.bfloat16), offs=offs) * gates.flatten()[order, None]
            out.index_add_(0, order // self.top_k, ys.to(out.dtype))
        for e in range(0 if self.grouped else self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            h = F.gelu(x2[tok] @ w1[e].t(), approximate=self.approximate)
            out.index_add_(0, tok, ((h @ w2[e]) * gates[tok, slot, None]).to(out.dtype))
        if self.training:
            f = torch.bincount(idx.flatten(), minlength=self.experts).float() / idx.numel()
            self.aux = self.experts * (f * probs.mean(0)).sum() * self.aux_weight
        return out.view(shape)


class GPTBlock(nn.Module):
    """Pre-norm decoder block: h + attn(ln1(h)), then + mlp(ln2(h)); with moe, a mixture of experts as mlp."""

    def __init__(self, dim, heads, hidden, gelu="erf", moe=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPTAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = GPTMoE(dim, hidden, gelu=gelu, **moe) if moe else GPTMLP(dim, hidden, gelu)

    def forward(self, h):
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


class GPT(nn.Module):
    """The zoo's gpt (dropout 0, tied weights): tok_embed + pos_embed[:T] -> blocks -> norm -> h @ tok_embed^T.
    Parameter names are those of a Coppice checkpoint (without its "model." prefix). gelu: the zoo's gelu
    option, "erf" or "tanh"."""

    def __init__(self, vocab_size, context, dim, layers, heads, mlp_ratio, gelu="erf", moe=None):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab_size, dim)
        # N(0, 0.02) as models/gpt.cc: nn.Embedding's N(0, 1), tied to the output, made logits ~30x larger and
        # the first loss ~68 where Coppice's is ln(256) = 5.5 (H200, bench train gpt beside this, 2026-11-29).
        nn.init.normal_(self.tok_embed.weight, std=0.02)
        self.pos_embed = nn.Parameter(torch.randn(context, dim) * 0.02)
        self.blocks = nn.ModuleList(GPTBlock(dim, heads, mlp_ratio * dim, gelu, moe) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        h = self.tok_embed(x) + self.pos_embed[:x.shape[1]]
        for b in self.blocks:
            h = b(h)
        return F.linear(self.norm(h), self.tok_embed.weight)  # [N, T, vocab]

    def sparse_slots(self, count):
        return [(m, w) for b in self.blocks for m, w in ((b.attn, "qkv"), (b.attn, "proj"),
                                                           (b.mlp, "fc1"), (b.mlp, "fc2"))]


def gpt_size(device):
    return GPT_CUDA if device.type == "cuda" else GPT_CPU


def make_model(name, args, device):
    """(model, x, y, shape) with the model on device; the shape as bench train reports it."""
    torch.manual_seed(MODEL_SEED)
    g = torch.Generator().manual_seed(DATA_SEED)
    if name in ("gpt", "gpt_moe"):
        c = gpt_size(device)
        model = GPT(c["vocab_size"], c["context"], c["dim"], c["layers"], c["heads"], c["mlp_ratio"], args.gelu,
                    MOE if name == "gpt_moe" else None)
        for m in model.modules():
            if isinstance(m, GPTMoE):
                m.grouped = args.moe_impl == "grouped"
        x = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]), generator=g)
        y = torch.randint(0, c["vocab_size"], (c["batch"], c["seq"]), generator=g)
        return model.to(device), x.to(device), y.to(device), [c["batch"], c["seq"]]
    if name == "mlp":
        sizes = [args.hidden] * 4 + [CLASSES]
        model, batch = MLP(sizes), args.batch
        x = torch.randn(batch, args.hidden, generator=g)
        shape = [batch] + sizes
    elif name == "lenet300":
        model, batch = MLP([784, 300, 100, CLASSES]), JOB_BATCH
        x = torch.randn(batch, 784, generator=g)
        shape = [batch, 784]
    else:
        model, batch = ViT(device, gelu=args.gelu), JOB_BATCH
        x = torch.randn(batch, 1, 28, 28, generator=g)
        shape = [batch, 1, 28, 28]
    y = torch.randint(0, CLASSES, (batch,), generator=g)
    return model.to(device), x.to(device), y.to(device), shape


def sparse_slot_count(name, model):
    if name in ("gpt", "gpt_moe"):
        return 4 * len(model.blocks)
    return {"mlp": 3, "lenet300": 3, "vit": 4}[name]


def mask_model(model, name, pattern, sparsity, device, block=BLOCK):
    """Replaces the weights bench train makes sparse by MaskedLinear; returns the masked layers. A slot is
    (holder, i): holder[i] for a ModuleList index, the attribute i of holder for a name (gpt)."""
    masked = []
    for purpose, (holder, i) in enumerate(model.sparse_slots(sparse_slot_count(name, model)), start=1):
        lin = getattr(holder, i) if isinstance(i, str) else holder[i]
        rows, cols = lin.weight.shape
        mask = weight_mask(pattern, sparsity, rows, cols, MASK_SEED + purpose, device, block)
        layer = MaskedLinear(lin, mask)
        if isinstance(i, str):
            setattr(holder, i, layer)
        else:
            holder[i] = layer
        masked.append(layer)
    return masked


def coppice_sparsify(model, name, pattern, sparsity, block=BLOCK):
    """The slots bench train makes sparse as coppice.torch SparseLinear layers (format coppice_csr, coppice_bsr,
    coppice_nm: Coppice's kernels inside this PyTorch model) at the masked variants' kind of pattern (random
    entries, random blocks of `block`, 2 random of 4); returns them."""
    import coppice.torch as ct  # only when asked: the package is installed on the GPU machine by run_python_cuda.sh
    names = {id(m): n for n, m in model.named_modules()}
    fmt = pattern[len("coppice_"):]
    rules = []
    for holder, i in model.sparse_slots(sparse_slot_count(name, model)):
        prefix = names[id(holder)]
        rules.append({"name": f"{prefix}.{i}" if prefix else str(i), "format": fmt, "density": 1.0 - sparsity})
        if fmt == "bsr":
            lin = getattr(holder, i) if isinstance(i, str) else holder[i]
            rules[-1]["block"] = bsr_block_for(*lin.weight.shape, block)
    ct.sparsify_(model, rules, criterion="random", generator=torch.Generator().manual_seed(MASK_SEED))
    return [m for m in model.modules() if isinstance(m, ct.SparseLinear)]


def state_bytes(model, opt):
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if t is not None and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()

    for p in model.parameters():
        add(p)
        add(p.grad)
        for v in opt.state.get(p, {}).values():
            if torch.is_tensor(v) and v.dim() > 0:
                add(v)
    return total


def set_mode(mode):
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def run_case(args, name, pattern, sparsity, mode, device, compile_mode=None, cuda_graph=False):
    cuda = device.type == "cuda"
    model, x, y, shape = make_model(name, args, device)
    params_dense = sum(p.numel() for p in model.parameters())
    coppice_layers = []
    if pattern and pattern.startswith("coppice_"):
        coppice_layers = coppice_sparsify(model, name, pattern, sparsity, args.block)
    masked = mask_model(model, name, pattern, sparsity, device, args.block) if pattern and not coppice_layers else []
    forward = torch.compile(model, mode=compile_mode) if compile_mode else model
    stored = params_dense - sum(int((m.mask == 0).sum()) for m in masked)
    stored -= sum(m.in_features * m.out_features - m.nnz for m in coppice_layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    set_mode(mode)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=mode == "bf16")
    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            out = forward(x)  # [N, classes], or gpt's [N, T, vocab]: every position counts
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            aux = [m.aux for m in model.modules() if isinstance(m, GPTMoE) and m.aux is not None]
        (loss + sum(aux) if aux else loss).backward()
        opt.step()
        for m in masked:
            m.reapply()
        last["loss"] = loss

    def timed_step():
        if not cuda:
            t0 = time.perf_counter()
            step()
            return (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    run = step
    if cuda_graph:  # warm-up on a side stream, then one capture of the whole step (PyTorch's whole-network recipe)
        if not cuda:
            raise ValueError("--cuda-graph needs CUDA")
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(max(args.warmup, 3)):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run = graph.replay

    compile_s = None
    if compile_mode:  # the first step traces and compiles: timed apart, outside the samples
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize(device)
        compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        run()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    samples = [timed_step() for _ in range(args.steps)]
    med = statistics.median(samples)
    r = {
        "status": "ok", "median_ms": med, "min_ms": min(samples), "max_ms": max(samples), "reps": len(samples),
        "inner": 1, "shape": shape, "batch": shape[0], "samples_per_s": shape[0] / (med * 1e-3),
        "sparse_weights": len(masked), "params_dense": params_dense, "params_stored": stored,
        "training_state_bytes": state_bytes(model, opt),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "final_loss": float(last["loss"].item()), "compile": compile_mode, "compile_s": compile_s,
        "cuda_graph": cuda_graph,
    }
    if pattern:
        r["nnz"] = sum(int(m.mask.sum()) for m in masked) + sum(m.nnz for m in coppice_layers)
    if name == "mlp":
        r["gflops"] = 6.0 * shape[0] * stored / (med * 1e-3) / 1e9
    if name in ("gpt", "gpt_moe"):
        r["tokens_per_s"] = shape[0] * shape[1] / (med * 1e-3)
    if pattern in ("bsr", "coppice_bsr"):
        r["block"] = args.block
    return r


def op_name(args, name):
    """The record's op: the model, "+gelu_tanh" for a vit or gpt with --gelu tanh (bench train's row names)."""
    return name + "+gelu_tanh" if args.gelu == "tanh" and name in ("vit", "gpt", "gpt_moe") else name


def record(args, name, pattern, sparsity, mode, device_name):
    return {
        "suite": "train", "op": op_name(args, name), "device": "cuda:0" if args.device == "cuda" else "cpu",
        "device_name": device_name, "dtype": mode,
        "format": "dense" if not pattern else "coppice.torch" if pattern.startswith("coppice_") else "masked",
        "pattern": (pattern or "dense").replace("coppice_", ""), "sparsity": sparsity, "shape": [], "status": "ok",
        "median_ms": None, "min_ms": None, "max_ms": None, "reps": 0, "inner": 0, "compile": None,
        "cuda_graph": False,
    }


def log(r):
    what = f"{r['op']} {r['format']}"
    if r["pattern"] != "dense":
        what += f" {r['pattern']} {100 * r['sparsity']:g}%"
    if r.get("compile"):
        what += f" compiled ({r['compile']})"
    if r.get("cuda_graph"):
        what += " CUDA graph"
    if r["status"] != "ok":
        print(f"torch train {r['device']:<6} {r['dtype']:<4} {what:<24} {r['status']}", file=sys.stderr)
        return
    print(f"torch train {r['device']:<6} {r['dtype']:<4} {what:<24} {r['median_ms']:10.3f} ms/step  "
          f"state {r['training_state_bytes'] / 1e6:.2f} MB  loss {r['final_loss']:.5g}", file=sys.stderr)


def main(argv):
    args = parse_args(argv)
    cuda = args.device == "cuda"
    available = torch.cuda.is_available() if cuda else True
    device = torch.device("cuda:0" if cuda else "cpu")
    device_name = (torch.cuda.get_device_name(0) if available else "") if cuda else cpu_model_name()
    results = []
    for name in args.models:
        for pattern, sparsity in variants(args.formats, args.sparsities):
            for mode in args.modes:
                runs = [(None, False)] + [(m, False) for m in args.compile]
                if args.cuda_graph:  # captured too, where the mode does not capture graphs of its own
                    runs += [(m, True) for m in [None] + args.compile if m in (None, *GRAPHLESS_COMPILE_MODES)]
                for compile_mode, cuda_graph in runs:
                    r = record(args, name, pattern, sparsity, mode, device_name)
                    r["compile"], r["cuda_graph"] = compile_mode, cuda_graph
                    if not available:
                        r["status"] = "skipped: no CUDA device (none visible)"
                    elif cuda_graph and not cuda:
                        r["status"] = "skipped: CUDA graphs need CUDA"
                    elif mode == "tf32" and not cuda:
                        r["status"] = "skipped: TF32 is a CUDA mode (on the CPU it would repeat f32)"  # as bench train
                    else:
                        try:
                            r.update(run_case(args, name, pattern, sparsity, mode, device, compile_mode, cuda_graph))
                        except Exception as e:  # report, as the C++ bench does, and go on
                            traceback.print_exc()
                            r["status"] = f"error: {type(e).__name__}: {e}"
                        if cuda:
                            torch.cuda.empty_cache()
                    log(r)
                    results.append(r)
    set_mode("f32")
    report = {
        "tool": "torch-train",
        "torch_version": torch.__version__,
        "cpu_name": cpu_model_name(),
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
        "settings": "f32: allow_tf32=False; tf32: matmul and cudnn allow_tf32=True; bf16: autocast over f32 params",
        "schema_version": 1,
        "cuda_device_count": torch.cuda.device_count(),
        "cpu_threads": torch.get_num_threads(),
        "warmup": args.warmup,
        "steps": args.steps,
        "results": results,
    }
    return write_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
