#!/usr/bin/env python3
"""The validation loss of a Coppice gpt checkpoint, computed again by PyTorch alone: an independent check of the
loss the trainer reports for the byte-level GPT jobs on the Linux 6.1 documentation.

    eval_gpt_torch.py CHECKPOINT --corpus DIR [--suffix .rst.txt] [--seq-len 512] [--stride S]
                      [--validation-split F] [--batch B] [--max-batches M] [--device cuda|cpu]
                      [--dtype auto|f32|bf16|f16|f64] [--attention sdpa|math]
                      [--vocab-size V] [--context C] [--dim D] [--layers L] [--heads H] [--mlp-ratio R]
                      [--tie-weights true|false] [--gelu erf|tanh] [--allow-corpus-mismatch]

Prints one JSON line {"val_loss": ..., "perplexity": exp(val_loss), "tokens": ...} on stdout (tokens: the
target tokens averaged over, evaluated windows x seq_len, what Coppice's eval record calls "examples"; what it
read and decided goes to stderr); exit 0. A bad input (a missing or unreadable file, a checkpoint that is not of a gpt
model, missing or misshapen parameters, a corpus that is not the one the job read, settings that hold out no
window) is one line "eval_gpt_torch: error: ..." on stderr and exit 2; a failure while evaluating, exit 1.

The checkpoint (train/checkpoint.h): safetensors read by read_checkpoint_torch.py's load (beside this script,
here and in .devbin/); the model's entries are "model.<name>" (a file without that prefix is read as a bare
state dict). A sparse weight is stored as its parts, "<w>.<part>", with metadata coppice.format.<w>,
coppice.shape.<w> and coppice.attr.<w>.<key> (sparse/io/sparse_safetensors.h); every format (bsr, csr, csc,
coo, blocked_ell, nm, masked) is rebuilt into a dense tensor here with plain index operations.

The model (the zoo's gpt): tok_embed.weight [V, D], pos_embed [C, D]; blocks.{i} for i < L: ln1, attn.qkv [3D, D],
attn.proj [D, D], ln2, mlp.fc1 [F, D], mlp.fc2 [D, F] (weights and biases; F = mlp_ratio * D); norm; head.weight
[V, D] and head.bias [V] only when tie_weights is false. Forward of token ids x [N, T]: h = tok_embed.weight[x] +
pos_embed[:T]; per block h += proj(attention(ln1(h))), h += fc2(gelu(fc1(ln2(h)))) (the exact erf GELU, F.gelu, or
with the option gelu tanh GPT-2's tanh approximation, F.gelu(approximate='tanh'); LayerNorm eps 1e-5, causal
softmax attention over H heads of D/H with q scaled by 1/sqrt(D/H)); logits = norm(h) @ tok_embed.weight^T (tied)
or head(norm(h)). Dropout does nothing in evaluation. --attention sdpa (default) computes attention with
F.scaled_dot_product_attention(is_causal=True) (the flash kernel in bf16/f16: scores and softmax in f32, one
rounding of the output), as Coppice's fused attention (sparse/attention/attention.h: online softmax in f32 for
16-bit inputs) does; --attention math computes it as models/attention.cc's attend_dense does, op by op in the
model's dtype (q * 1/sqrt(D/H), the scores q k^T materialized and rounded, -inf above the diagonal, softmax, then
times v), for a model built on that path. In f32 the two agree far below 1e-3; in bf16 take the one the C++ gpt
uses.

The options: read from the job fingerprint the checkpoint carries (metadata "job.*", train/job_fingerprint.cc):
"job.model.name" must be "gpt", and "job.model.options.<name>" holds each option the job set (the others are
the zoo's defaults: vocab_size 256, context 512, dim 1024, layers 8, heads 16, mlp_ratio 4, tie_weights true,
gelu erf). An option the fingerprint does not record comes from its flag, else from the tensors' shapes (V, C, D,
L, F and whether head.weight exists), else the default (heads: 16; gelu: erf, which no shape tells). Recorded or
given values that disagree with the shapes are an error.

The data, as the trainer builds it (data/text_corpus.cc, data/text.cc, train/job.cc, data/loader.cc):
  corpus    the files under --corpus whose names end in the suffix, walked recursively without following
            directory symlinks, read in the bytewise order of their paths relative to --corpus, each
            followed by a newline where it does not end in one (a regular file is read whole). Its size and
            CRC-32 must equal the fingerprint's "job.data.files" (name:bytes:crc32), else it is not the text
            the job read (--allow-corpus-mismatch goes on anyway).
  tokens    data.vocab bytes (fingerprint "job.data.vocab": "bytes"): token = byte value; otherwise
            ("distinct") token i is the i-th smallest byte value present in the corpus.
  windows   CharTextDataset: with n tokens, stride s (0 means seq_len) and seq_len T, window i (i < size =
            (n - T - 1) // s + 1) is inputs tokens[i*s : i*s + T], targets tokens[i*s + 1 : i*s + T + 1].
  split     train/job.cc load_data, text case: split_last_validation, so the LAST nv = floor(size *
            validation_split) windows (in order; double arithmetic as C++'s std::floor) validate:
            size - nv .. size - 1 (data/dataset.cc split_last). No shuffling, no seed.
  loader    train/job.cc loader_options: the evaluation loader keeps the job's batch size (data.batch_size, or
            data.eval_batch_size where the job sets it: the fingerprint records only the former, so pass
            --batch for the latter), with shuffle and drop_last off and no sharding: batch k is validation
            windows k*B .. min((k+1)*B, nv) - 1, the last batch short.
  averaging train/evaluate.cc evaluate: batches = ceil(nv / B), or min(evaluation.max_batches, that) when
            max_batches > 0 (not in the fingerprint: pass --max-batches as the job's evaluation.max_batches);
            per batch the mean cross-entropy of the f32 logits [B*T, V] against the targets, times B*T, summed in
            double; the loss is that sum over the total B*T. So every target token of the evaluated windows
            weighs the same (the short last batch included), and with max_batches > 0 only the first
            max_batches * B validation windows count. Several ranks take batches in turn and all-reduce the
            sums, which gives the same loss. This script does the same, in the same batches.
Settings come from the fingerprint ("job.data.seq_len", "job.data.stride", "job.data.validation_split",
"job.data.batch_size", "job.data.suffix" (absent: ""), "job.data.vocab"); a flag given overrides its value
(with a warning when they differ). Without a fingerprint the flags' defaults are: suffix .rst.txt, seq_len 512,
stride 0, batch 32, vocab bytes, and --validation-split is required.

Numerics: the model runs in the checkpoint's dtype (--dtype auto: a bf16 job's parameters are bf16, and
Coppice evaluates it in bf16 with f32 logits for the loss, train/mixed_precision.h), f32 matmuls without TF32
and 16-bit ones without reduced-precision reductions, like Coppice's cuBLAS calls. --dtype f32 evaluates a
16-bit checkpoint's weights in f32 instead (the loss of the weights, not of Coppice's 16-bit arithmetic).
Compare val_loss with the "kind": "eval" record of the checkpoint's step in the run's metrics.jsonl (the loop
evaluates before it checkpoints at a step, so both see the same weights), or with the summary's validation
loss where the last evaluation was at the checkpoint's step.
"""
import argparse
import json
import math
import os
import sys
import zlib

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as _e:  # a clear line instead of a traceback
    print(f"eval_gpt_torch: error: PyTorch is needed ({_e})", file=sys.stderr)
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_checkpoint_torch  # noqa: E402  (beside this file, here and in .devbin/)

PROG = "eval_gpt_torch"
DEFAULTS = dict(vocab_size=256, context=512, dim=1024, layers=8, heads=16, mlp_ratio=4, tie_weights=True,
                gelu="erf")
GELU_FORMS = {"erf": "none", "tanh": "tanh"}  # the zoo's gelu option -> F.gelu's approximate
KNOWN_OPTIONS = set(DEFAULTS) | {"dropout", "seed", "dtype"}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}


class BadInput(Exception):
    """A problem with what the script was given: exit 2."""


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def note(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)


# ---- command line ---------------------------------------------------------------------------------------------

def parse_bool(s):
    v = str(s).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{s}'")


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--corpus", required=True, help="the directory (or file) the job's data.path named")
    # None: not given (the checkpoint's fingerprint decides, else the documented default).
    p.add_argument("--suffix", default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--stride", type=int, default=None)
    p.add_argument("--validation-split", type=float, default=None)
    p.add_argument("--batch", type=int, default=None, help="the evaluation batch (data.eval_batch_size or batch_size)")
    p.add_argument("--max-batches", type=int, default=0, help="the job's evaluation.max_batches (0: all)")
    p.add_argument("--vocab", choices=["bytes", "distinct"], default=None)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dtype", choices=["auto"] + list(DTYPES), default="auto")
    p.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    for name in ("vocab_size", "context", "dim", "layers", "heads"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    p.add_argument("--mlp-ratio", type=float, default=None)
    p.add_argument("--tie-weights", type=parse_bool, default=None)
    p.add_argument("--gelu", choices=sorted(GELU_FORMS), default=None,
                   help="the model's GELU (model.options.gelu), where the checkpoint does not record it (erf)")
    p.add_argument("--allow-corpus-mismatch", action="store_true")
    a = p.parse_args(argv)
    for flag in ("seq_len", "batch", "vocab_size", "context", "dim", "layers", "heads"):
        v = getattr(a, flag)
        if v is not None and v < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {v}")
    if a.stride is not None and a.stride < 0:
        p.error(f"--stride must be >= 0 (0: seq_len), got {a.stride}")
    if a.max_batches < 0:
        p.error(f"--max-batches must be >= 0 (0: all), got {a.max_batches}")
    if a.validation_split is not None and not 0.0 < a.validation_split < 1.0:
        p.error(f"--validation-split must be in (0, 1), got {a.validation_split}")
    if a.mlp_ratio is not None and a.mlp_ratio <= 0:
        p.error(f"--mlp-ratio must be positive, got {a.mlp_ratio}")
    return a


# ---- the checkpoint ---------------------------------------------------------------------------------------------

def load_checkpoint(path):
    """(tensors, metadata) of the safetensors file, or BadInput naming what is wrong."""
    if not os.path.exists(path):
        raise BadInput(f"checkpoint '{path}' not found")
    if os.path.isdir(path):
        raise BadInput(f"checkpoint '{path}' is a directory; name one checkpoint file (ckpt-*.safetensors)")
    try:
        return read_checkpoint_torch.load(path)
    except OSError as e:
        raise BadInput(f"checkpoint '{path}' cannot be read: {e.strerror or e}")
    except Exception as e:  # a truncated or foreign file: the header or an entry does not parse
        raise BadInput(f"checkpoint '{path}' is not a readable safetensors file ({type(e).__name__}: {e})")


def attr(meta, w, key):
    return meta.get(f"coppice.attr.{w}.{key}")


def block_shape(meta, w):
    """(bh, bw) of a block format's "block" attribute ("BHxBW" or "B"), or None."""
    v = attr(meta, w, "block")
    if not v:
        return None
    parts = v.lower().split("x")
    return (int(parts[0]), int(parts[-1]))


def densify(w, fmt, size, tensors, meta):
    """The dense tensor of sparse weight `w` stored as `fmt` parts (sparse/io/sparse_safetensors.h)."""

    def part(name):
        key = f"{w}.{name}"
        if key not in tensors:
            raise BadInput(f"sparse weight '{w}' ({fmt}) lacks its part '{key}'")
        return tensors[key]

    def work(v):  # values in a type that index_put/scatter take everywhere; exact for 16-bit values
        return v.to(torch.float64 if v.dtype == torch.float64 else torch.float32) if v.is_floating_point() else v

    if fmt == "masked":
        v, m = part("values"), part("mask")
        return torch.where(m.to(torch.bool), v, torch.zeros((), dtype=v.dtype))
    if fmt in ("csr", "csc"):
        rows, cols = size
        ptr_name, idx_name = ("crow_indices", "col_indices") if fmt == "csr" else ("ccol_indices", "row_indices")
        ptr, idx, v = part(ptr_name).long(), part(idx_name).long(), part("values")
        major = rows if fmt == "csr" else cols
        if ptr.numel() != major + 1 or int(ptr[-1]) != idx.numel() or idx.numel() != v.numel():
            raise BadInput(f"sparse weight '{w}' ({fmt}): parts of {ptr.numel()}, {idx.numel()} and {v.numel()} "
                           f"entries do not fit the shape {size}")
        outer = torch.repeat_interleave(torch.arange(major), ptr[1:] - ptr[:-1])
        out = torch.zeros(rows, cols, dtype=work(v).dtype)
        if fmt == "csr":
            out[outer, idx] = work(v)
        else:
            out[idx, outer] = work(v)
        return out.to(v.dtype)
    if fmt == "coo":
        idx, v = part("indices").long(), part("values")
        out = torch.zeros(*size, dtype=work(v).dtype)
        out.index_put_(tuple(idx), work(v), accumulate=True)  # an uncoalesced COO sums its duplicates
        return out.to(v.dtype)
    if fmt == "bsr":
        rows, cols = size
        crow, col, v = part("crow_indices").long(), part("col_indices").long(), part("values")
        bh, bw = (int(v.shape[1]), int(v.shape[2])) if v.dim() == 3 else (block_shape(meta, w) or (1, 1))
        nbr, nbc = rows // bh, cols // bw
        if nbr * bh != rows or nbc * bw != cols or crow.numel() != nbr + 1 or int(crow[-1]) != col.numel():
            raise BadInput(f"sparse weight '{w}' (bsr): blocks {bh}x{bw} and {crow.numel() - 1} block rows do not "
                           f"fit the shape {size}")
        brow = torch.repeat_interleave(torch.arange(nbr), crow[1:] - crow[:-1])
        blocks = torch.zeros(nbr, nbc, bh, bw, dtype=work(v).dtype)
        blocks[brow, col] = work(v).reshape(-1, bh, bw)
        return blocks.permute(0, 2, 1, 3).reshape(rows, cols).to(v.dtype)
    if fmt == "blocked_ell":
        rows, cols = size
        ell, v = part("ell_col_indices").long(), part("values")
        nbr, slots = ell.shape
        b = rows // nbr
        vb = work(v).reshape(nbr, b, slots, b).permute(0, 2, 1, 3)  # [block row, slot, b, b]
        br, j = (ell >= 0).nonzero(as_tuple=True)
        blocks = torch.zeros(nbr, cols // b, b, b, dtype=vb.dtype)
        blocks[br, ell[br, j]] = vb[br, j]
        return blocks.permute(0, 2, 1, 3).reshape(rows, cols).to(v.dtype)
    if fmt == "nm":
        n, m = attr(meta, w, "n"), attr(meta, w, "m")
        if n is None or m is None:
            raise BadInput(f"sparse weight '{w}' (nm) lacks its attributes coppice.attr.{w}.n / .m")
        n, m = int(n), int(m)
        v, idx = part("values"), part("indices").long()
        groups = size[-1] // m
        vv = work(v).reshape(-1, groups, n)
        out = torch.zeros(vv.shape[0], groups, m, dtype=vv.dtype)
        out.scatter_(2, idx.reshape(-1, groups, n), vv)
        return out.reshape(size).to(v.dtype)
    raise BadInput(f"sparse weight '{w}' has format '{fmt}', which this script does not rebuild")


def model_state(tensors, meta):
    """{name: dense tensor} of the model's parameters and buffers (the "model." prefix removed), sparse weights
    rebuilt; and the prefix found ("model." or "" for a bare state dict)."""
    prefix = "model."
    if not any(k.startswith(prefix) for k in tensors):
        prefix = ""
    sparse = {k[len("coppice.format."):]: v for k, v in meta.items() if k.startswith("coppice.format.")}
    sparse = {w: f for w, f in sparse.items() if w.startswith(prefix)}
    state = {}
    for w, fmt in sorted(sparse.items()):
        try:
            size = [int(s) for s in json.loads(meta.get("coppice.shape." + w, "null"))]
        except (TypeError, ValueError):
            raise BadInput(f"sparse weight '{w}' has no readable coppice.shape.{w} metadata")
        try:
            state[w[len(prefix):]] = densify(w, fmt, size, tensors, meta)
        except BadInput:
            raise
        except Exception as e:
            raise BadInput(f"sparse weight '{w}' ({fmt}, shape {size}) cannot be rebuilt ({type(e).__name__}: {e})")
    parts = tuple(w + "." for w in sparse)  # the entries that were parts ("".startswith(()) is False)
    for name, t in tensors.items():
        if name.startswith(prefix) and not name.startswith(parts):
            state[name[len(prefix):]] = t
    return state, prefix


# ---- options ---------------------------------------------------------------------------------------------------

def fingerprint(meta):
    return {k[len("job."):]: v for k, v in meta.items() if k.startswith("job.")}


def recorded_option(fp, name, kind):
    v = fp.get("model.options." + name)
    if v is None:
        return None
    try:
        if kind is bool:
            return parse_bool(v)
        if kind is int:
            f = float(v)
            if f != int(f):
                raise ValueError
            return int(f)
        return float(v)
    except (ValueError, argparse.ArgumentTypeError):
        raise BadInput(f"the checkpoint's job.model.options.{name} is '{v}', not a {kind.__name__}")


def check_model_name(fp):
    name = fp.get("model.name")
    if name is not None and name != "gpt":
        raise BadInput(f"the checkpoint is of a '{name}' model (job.model.name), not gpt")


def resolve_options(args, fp, state):
    """The gpt's options: recorded in the fingerprint, else the flag, else the tensors' shapes, else the default;
    the recorded and given ones checked against the shapes."""
    check_model_name(fp)
    if fp.get("model.name") is None:
        warn("the checkpoint records no job fingerprint (job.model.name): options come from the flags and the "
             "tensors' shapes; heads from --heads (default 16)")
    for k in sorted(fp):
        if k.startswith("model.options.") and k[len("model.options."):] not in KNOWN_OPTIONS:
            warn(f"model option '{k[len('model.options.'):]}' = '{fp[k]}' is not one this script knows "
                 "(it builds the plain gpt; the loss may differ)")
    for k in sorted(fp):
        if k.startswith("sparsity.outputs["):
            warn(f"the job sparsifies activations ({k}: {fp[k]}); this script runs the dense forward")

    shapes = {}
    tok, pos = state.get("tok_embed.weight"), state.get("pos_embed")
    if tok is not None and tok.dim() == 2:
        shapes["vocab_size"], shapes["dim"] = int(tok.shape[0]), int(tok.shape[1])
    if pos is not None and pos.dim() == 2:
        shapes["context"] = int(pos.shape[0])
    blocks = {int(k.split(".")[1]) for k in state if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    if blocks:
        shapes["layers"] = max(blocks) + 1
    fc1 = state.get("blocks.0.mlp.fc1.weight")
    if fc1 is not None and fc1.dim() == 2 and "dim" in shapes:
        shapes["mlp_ratio"] = fc1.shape[0] / shapes["dim"]
    if tok is not None:
        shapes["tie_weights"] = "head.weight" not in state

    opts, source = {}, {}
    for key, kind in (("vocab_size", int), ("context", int), ("dim", int), ("layers", int), ("heads", int),
                      ("mlp_ratio", float), ("tie_weights", bool)):
        rec, flag = recorded_option(fp, key, kind), getattr(args, key)
        if rec is not None:
            opts[key], source[key] = rec, "the fingerprint"
            if flag is not None and flag != rec:
                warn(f"--{key.replace('_', '-')} {flag} ignored: the checkpoint records {key} {rec}")
        elif flag is not None:
            opts[key], source[key] = flag, "the command line"
        elif key in shapes:
            opts[key], source[key] = shapes[key], "the tensors' shapes"
        else:
            opts[key], source[key] = DEFAULTS[key], "the zoo's default"
        if key in shapes and opts[key] != shapes[key]:
            raise BadInput(f"{key} is {opts[key]} by {source[key]} but the checkpoint's tensors make it {shapes[key]}")
    # gelu: a string no tensor's shape shows; recorded, else the flag, else erf.
    rec, flag = fp.get("model.options.gelu"), args.gelu
    if rec is not None and rec not in GELU_FORMS:
        raise BadInput(f"the checkpoint's job.model.options.gelu is '{rec}', not one of "
                       f"{', '.join(sorted(GELU_FORMS))}")
    if rec is not None and flag is not None and flag != rec:
        warn(f"--gelu {flag} ignored: the checkpoint records gelu {rec}")
    opts["gelu"] = rec if rec is not None else flag if flag is not None else DEFAULTS["gelu"]
    hidden = opts["mlp_ratio"] * opts["dim"]
    if hidden != int(hidden):
        raise BadInput(f"mlp_ratio {opts['mlp_ratio']} x dim {opts['dim']} is not a whole MLP width")
    opts["hidden"] = int(hidden)
    opts["mlp_ratio"] = int(opts["mlp_ratio"]) if opts["mlp_ratio"] == int(opts["mlp_ratio"]) else opts["mlp_ratio"]
    if opts["dim"] % opts["heads"]:
        raise BadInput(f"heads {opts['heads']} ({source['heads']}) do not divide dim {opts['dim']}")
    return opts


def expected_shapes(o):
    v, c, d, f = o["vocab_size"], o["context"], o["dim"], o["hidden"]
    out = {"tok_embed.weight": [v, d], "pos_embed": [c, d]}
    for i in range(o["layers"]):
        b = f"blocks.{i}."
        out.update({b + "ln1.weight": [d], b + "ln1.bias": [d],
                    b + "attn.qkv.weight": [3 * d, d], b + "attn.qkv.bias": [3 * d],
                    b + "attn.proj.weight": [d, d], b + "attn.proj.bias": [d],
                    b + "ln2.weight": [d], b + "ln2.bias": [d],
                    b + "mlp.fc1.weight": [f, d], b + "mlp.fc1.bias": [f],
                    b + "mlp.fc2.weight": [d, f], b + "mlp.fc2.bias": [d]})
    out.update({"norm.weight": [d], "norm.bias": [d]})
    if not o["tie_weights"]:
        out.update({"head.weight": [v, d], "head.bias": [v]})
    return out


def check_parameters(state, opts, prefix):
    want = expected_shapes(opts)
    missing = [k for k in want if k not in state]
    if missing:
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise BadInput(f"the checkpoint lacks {len(missing)} parameter(s) of the gpt: "
                       f"{', '.join(prefix + k for k in missing[:8])}{more}")
    for k, shape in want.items():
        if list(state[k].shape) != shape:
            raise BadInput(f"parameter '{prefix}{k}' is {list(state[k].shape)}, expected {shape}")
        if not state[k].is_floating_point():
            raise BadInput(f"parameter '{prefix}{k}' is {state[k].dtype}, not floating point")
    extra = sorted(k for k in state if k not in want)
    if extra:
        warn(f"{len(extra)} model entr{'y' if len(extra) == 1 else 'ies'} the gpt does not use: "
             f"{', '.join(prefix + k for k in extra[:8])}{' ...' if len(extra) > 8 else ''}")
    return {k: state[k] for k in want}


# ---- the model -------------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, dim, heads, mode):
        super().__init__()
        self.heads, self.mode = heads, mode
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, t, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, dh).permute(2, 0, 3, 1, 4)  # each [N, H, T, dh]
        if self.mode == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # models/attention.cc attend_dense, op by op
            scores = torch.matmul(q * (1.0 / math.sqrt(dh)), k.transpose(-2, -1))  # [N, H, T, T]
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            a = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(a.transpose(1, 2).reshape(n, t, d))


class MLP(nn.Module):
    def __init__(self, dim, hidden, gelu="erf"):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.approximate = GELU_FORMS[gelu]  # erf: "none", the exact GELU; tanh: GPT-2's approximation

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, mode, gelu="erf"):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads, mode)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLP(dim, hidden, gelu)

    def forward(self, h):
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


class GPT(nn.Module):
    """The zoo's gpt in evaluation; parameter names are the checkpoint's without "model.". o["gelu"] (absent:
    "erf") is the zoo's gelu option."""

    def __init__(self, o, mode):
        super().__init__()
        self.tie = o["tie_weights"]
        self.tok_embed = nn.Embedding(o["vocab_size"], o["dim"])
        self.pos_embed = nn.Parameter(torch.zeros(o["context"], o["dim"]))
        gelu = o.get("gelu", "erf")
        self.blocks = nn.ModuleList(Block(o["dim"], o["heads"], o["hidden"], mode, gelu) for _ in range(o["layers"]))
        self.norm = nn.LayerNorm(o["dim"], eps=1e-5)
        if not self.tie:
            self.head = nn.Linear(o["dim"], o["vocab_size"])

    def forward(self, x):
        h = self.tok_embed(x) + self.pos_embed[:x.shape[1]]
        for b in self.blocks:
            h = b(h)
        h = self.norm(h)
        return F.linear(h, self.tok_embed.weight) if self.tie else self.head(h)


# ---- the data --------------------------------------------------------------------------------------------------

def read_corpus(path, suffix):
    """data/text_corpus.cc read_text_corpus: the bytes of a file, or of a tree's files ending in `suffix`."""
    if not os.path.exists(path):
        raise BadInput(f"text corpus {path}: not found")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read(), 1
    if not os.path.isdir(path):
        raise BadInput(f"text corpus {path}: neither a file nor a directory")
    root, want = os.fsencode(path), os.fsencode(suffix)
    files = []

    def walk_error(e):
        raise BadInput(f"text corpus {path}: cannot walk the directory: {e}")

    # os.walk does not descend into directory symlinks (followlinks=False), as recursive_directory_iterator;
    # os.path.isfile follows a file symlink, as directory_entry::is_regular_file does.
    for dirpath, _, names in os.walk(root, onerror=walk_error, followlinks=False):
        for name in names:
            full = os.path.join(dirpath, name)
            if name.endswith(want) and os.path.isfile(full):
                files.append(os.path.relpath(full, root).replace(os.sep.encode(), b"/"))
    if not files:
        raise BadInput(f"text corpus {path}: no file whose name ends in '{suffix}' (data.suffix) under it")
    files.sort()  # bytewise, as std::sort of the relative generic paths
    text = bytearray()
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            b = f.read()
        text += b
        if b and b[-1:] != b"\n":
            text += b"\n"
    return bytes(text), len(files)


def check_corpus(text, recorded, path, allow):
    """Compares the corpus with the fingerprint's "name:bytes:crc32" (train/job_fingerprint.cc bytes_identity)."""
    crc = f"{zlib.crc32(text) & 0xFFFFFFFF:08x}"
    if recorded is None:
        warn(f"the checkpoint records no job.data.files: cannot check the corpus ({len(text)} bytes, crc32 {crc})")
        return
    parts = recorded.rsplit(":", 2)
    if len(parts) != 3:
        warn(f"job.data.files '{recorded}' is not name:bytes:crc32; the corpus is not checked")
        return
    _, size, want = parts
    if size != str(len(text)) or want.lower() != crc:
        msg = (f"text corpus {path}: {len(text)} bytes with CRC-32 {crc}, but the job read {size} bytes with CRC-32 "
               f"{want} (job.data.files '{recorded}'): not the text the job was trained and evaluated on")
        if not allow:
            raise BadInput(msg + " (--allow-corpus-mismatch goes on anyway)")
        warn(msg)
    else:
        note(f"corpus matches the job's: {len(text)} bytes, CRC-32 {crc}")


def data_settings(args, fp):
    """seq_len, stride, validation_split, batch, suffix, vocab: the flag if given, else the fingerprint, else the
    default; a flag that differs from a recorded value wins, with a warning."""
    has = fp.get("data.dataset") is not None
    if has and fp["data.dataset"] != "text":
        raise BadInput(f"the job trained on data.dataset {fp['data.dataset']}, not a text corpus")

    def pick(flag, name, key, parse, default, what, why=""):
        rec = fp.get(key)
        if rec is not None:
            try:
                rec = parse(rec)
            except ValueError:
                raise BadInput(f"the checkpoint's job.{key} is '{fp[key]}', not a {what}")
        if flag is not None:
            if rec is not None and flag != rec:
                warn(f"{name} {flag} overrides the job's {key} {rec}{why}")
            return flag
        return rec if rec is not None else default

    s = {}
    s["seq_len"] = pick(args.seq_len, "--seq-len", "data.seq_len", int, 512, "integer")
    s["stride"] = pick(args.stride, "--stride", "data.stride", int, 0, "integer")
    s["validation_split"] = pick(args.validation_split, "--validation-split", "data.validation_split", float, None,
                                 "number")
    s["batch"] = pick(args.batch, "--batch", "data.batch_size", int, 32, "integer",
                      " (right where the job sets data.eval_batch_size)")
    # data.suffix and data.vocab are recorded only where the job set them (train/job_fingerprint.cc).
    s["suffix"] = pick(args.suffix, "--suffix", "data.suffix", str, "" if has else ".rst.txt", "string")
    s["vocab"] = pick(args.vocab, "--vocab", "data.vocab", str, "distinct" if has else "bytes", "string")
    if s["vocab"] not in ("bytes", "distinct"):
        raise BadInput(f"data.vocab '{s['vocab']}' is neither bytes nor distinct")
    if s["validation_split"] is None:
        raise BadInput("no validation split: the checkpoint records no job.data.validation_split; pass "
                       "--validation-split as the job's data.validation_split")
    if not 0.0 < s["validation_split"] < 1.0:
        raise BadInput(f"data.validation_split {s['validation_split']} holds out nothing (it must be in (0, 1))")
    if s["seq_len"] < 1 or s["stride"] < 0 or s["batch"] < 1:
        raise BadInput(f"seq_len {s['seq_len']}, stride {s['stride']} and batch {s['batch']} must be >= 1, >= 0, >= 1")
    if s["stride"] == 0:
        s["stride"] = s["seq_len"]
    return s


def tokenize(text, vocab, vocab_size):
    raw = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    if vocab == "bytes":
        tokens = raw
    else:  # CharVocab(text): the distinct bytes in increasing order
        present = torch.bincount(raw, minlength=256) > 0
        lut = torch.full((256,), -1, dtype=torch.long)
        lut[present] = torch.arange(int(present.sum()))
        tokens = lut[raw]
    top = int(tokens.max()) if tokens.numel() else -1
    if top >= vocab_size:
        raise BadInput(f"the corpus has token {top} ({vocab} vocabulary) but the model's vocab_size is {vocab_size}")
    return tokens


# ---- main ------------------------------------------------------------------------------------------------------

def evaluate(args):
    tensors, meta = load_checkpoint(args.checkpoint)
    fp = fingerprint(meta)
    fmt = meta.get("trainer.format")
    if fmt is not None and fmt != "coppice-checkpoint-2":
        warn(f"checkpoint format '{fmt}' (this script was written for coppice-checkpoint-2)")
    check_model_name(fp)  # before anything is rebuilt
    state, prefix = model_state(tensors, meta)
    del tensors
    opts = resolve_options(args, fp, state)
    params = check_parameters(state, opts, prefix)
    settings = data_settings(args, fp)
    if settings["seq_len"] > opts["context"]:
        raise BadInput(f"seq_len {settings['seq_len']} exceeds the model's context {opts['context']}")

    text, files = read_corpus(args.corpus, settings["suffix"])
    check_corpus(text, fp.get("data.files"), args.corpus, args.allow_corpus_mismatch)
    if len(text) <= settings["seq_len"]:  # CharTextDataset::from_path
        raise BadInput(f"text {args.corpus}: {len(text)} bytes, too short for one window of seq_len "
                       f"{settings['seq_len']} plus its next-char target")
    tokens = tokenize(text, settings["vocab"], opts["vocab_size"])
    del text
    n, t, stride = tokens.numel(), settings["seq_len"], settings["stride"]
    size = (n - t - 1) // stride + 1 if n > t else 0  # CharTextDataset::size()
    nv = int(math.floor(float(size) * settings["validation_split"]))  # train/job.cc validation_size
    if nv < 1:
        raise BadInput(f"validation_split {settings['validation_split']} of {size} windows holds out none")
    b = settings["batch"]
    batches = -(-nv // b)
    if args.max_batches > 0:
        batches = min(args.max_batches, batches)
    evaluated = min(batches * b, nv)

    dtype = DTYPES[args.dtype] if args.dtype != "auto" else params["tok_embed.weight"].dtype
    if dtype not in DTYPES.values():
        raise BadInput(f"the checkpoint's parameters are {dtype}; pass --dtype")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise BadInput("no CUDA device is visible; pass --device cpu")
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    # Coppice's numerics: plain f32 matmuls, f32 accumulation for 16-bit ones (tools/bench/torch_reference.py).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    model = GPT(opts, args.attention).to(dtype)
    model.load_state_dict(params, strict=True)  # copies (and casts) into the model's dtype
    del params, state
    model.to(device).eval()

    step = meta.get("trainer.step", "?")
    note(f"checkpoint {args.checkpoint} (step {step}): gpt V={opts['vocab_size']} C={opts['context']} "
         f"D={opts['dim']} L={opts['layers']} H={opts['heads']} F={opts['hidden']} tied={opts['tie_weights']} "
         f"gelu={opts['gelu']}; "
         f"{dtype} on {device}, attention {args.attention}")
    note(f"corpus {args.corpus}: {files} file(s), {n} tokens ({settings['vocab']}); {size} windows of {t} at stride "
         f"{stride}; validation = the last {nv} (windows {size - nv}..{size - 1}); evaluating {evaluated} of them "
         f"in {batches} batch(es) of {b}" + (f" (max_batches {args.max_batches})" if args.max_batches else ""))
    if args.max_batches == 0:
        note("all validation batches (evaluation.max_batches is not recorded in checkpoints: pass --max-batches "
             "where the job sets it)")
    elif args.batch is None and evaluated < nv:
        note("with max_batches the windows evaluated depend on the evaluation batch: pass --batch where the job "
             "sets data.eval_batch_size")

    offsets = torch.arange(t + 1)
    first = size - nv
    loss_sum, count = 0.0, 0
    with torch.no_grad():
        for k in range(batches):
            idx = torch.arange(first + k * b, first + min((k + 1) * b, nv))
            rows = tokens[(idx * stride).unsqueeze(1) + offsets]  # [B, T + 1]
            x, y = rows[:, :-1].contiguous().to(device), rows[:, 1:].contiguous().to(device)
            logits = model(x).float()  # train/mixed_precision.h logits_for_loss
            m = y.numel()
            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))) * m
            count += m
    loss = loss_sum / count
    try:
        ppl = math.exp(loss)
    except OverflowError:
        ppl = None
    print(json.dumps({"val_loss": loss, "perplexity": ppl, "tokens": count}))
    return 0


def main(argv):
    args = parse_args(argv)
    try:
        return evaluate(args)
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # one line, as Coppice's binaries print (CUDA out of memory, ...)
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"{PROG}: error: {type(e).__name__}: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
