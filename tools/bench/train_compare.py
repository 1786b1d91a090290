#!/usr/bin/env python3
"""Puts Coppice's training steps (bench train) beside PyTorch's (torch_train.py), as markdown.

    train_compare.py --coppice BENCH.json [BENCH2.json ...] --torch TORCH.json [--out TABLE.md]

One row per (model, variant, mode) Coppice reported; "<model>+graph" rows (bench train --cuda-graph: steps
replayed from a CUDA graph) are compared with the same PyTorch step as "<model>". Beside it, in the same mode (f32, tf32, bf16):
PyTorch's dense step of the same model, and PyTorch's masked step (dense weights times a fixed mask of the
same pattern kind and sparsity; "-" for Coppice's dense rows). Speedup = PyTorch dense ms / Coppice ms (above
1: Coppice's step is faster). State ratio = Coppice's training_state_bytes (weights with index arrays,
gradients, momentum) / PyTorch dense's (weights, gradients, momentum) of the same model and mode; issue 8's
target at 90 % sparsity is at most 0.25. When the PyTorch JSON has compiled steps (torch_train.py --compile),
two more columns: PyTorch's compiled dense step of the same model and mode (the fastest mode it ran) and the
speedup against it, torch.compile being the peer for transformer steps.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_compare import compare_main, human_bytes, num  # noqa: E402  (beside this file, here and in .devbin/)

STATE_TARGET = 0.25
GRAPH_SUFFIX = "+graph"


def sparsity_key(s):
    return None if s is None or (isinstance(s, float) and math.isnan(s)) else round(float(s), 4)


def variant_label(fmt, sparsity, block=None):
    if fmt == "dense":
        return "dense"
    if fmt == "nm":
        return "2:4"
    blocks = f" {block:.0f}x{block:.0f}" if fmt == "bsr" and block and not math.isnan(block) else ""
    return f"{fmt.upper()} {100 * sparsity:g} %{blocks}"


def ok_ms(r):
    return r["median_ms"] if r is not None and r.get("status") == "ok" else None


def compare(ours, theirs, meta):
    torch_by, compiled_by = {}, {}
    for r in theirs:
        if r.get("cuda_graph"):  # a captured step is not the eager peer of any row here
            continue
        if r.get("compile"):
            key = (r["op"], r["dtype"])
            if r.get("pattern", "dense") == "dense" and ok_ms(r) is not None and (
                    key not in compiled_by or ok_ms(r) < ok_ms(compiled_by[key])):
                compiled_by[key] = r
            continue
        torch_by[(r["op"], r["dtype"], r.get("pattern", "dense"), sparsity_key(r.get("sparsity")))] = r
    with_compiled = bool(compiled_by)
    lines = []
    if not ours:
        return "no bench train results\n"
    if meta:
        lines.append("; ".join(f"{k}: {v}" for k, v in sorted(meta.items())))
        lines.append("")
    compiled_head = " PyTorch compiled dense ms | speedup vs compiled |" if with_compiled else ""
    lines.append("| model | variant | mode | Coppice ms | PyTorch dense ms | PyTorch masked ms | speedup vs PyTorch "
                 "dense |" + compiled_head + " Coppice state | state ratio |")
    lines.append("|---|---|---|---:|---:|---:|---:|" + ("---:|---:|" if with_compiled else "") + "---:|---:|")
    notes = []
    for r in ours:
        fmt, sp = r.get("format", "dense"), sparsity_key(r.get("sparsity"))
        model = r["op"].removesuffix(GRAPH_SUFFIX)  # bench train --cuda-graph rows: the same PyTorch step
        dense = torch_by.get((model, r["dtype"], "dense", None))
        masked = torch_by.get((model, r["dtype"], fmt, sp)) if fmt != "dense" else None
        mine, theirs_dense = ok_ms(r), ok_ms(dense)
        speedup = theirs_dense / mine if mine and theirs_dense else None
        state = r.get("training_state_bytes") if r.get("status") == "ok" else None
        dense_state = dense.get("training_state_bytes") if dense is not None and dense.get("status") == "ok" else None
        ratio = state / dense_state if state and dense_state else None
        mark = " ✓" if ratio is not None and fmt != "dense" and sp == 0.9 and ratio <= STATE_TARGET else ""
        mine_text = num(mine, ".2f") if r.get("status") == "ok" else r.get("status", "?").split(":")[0]
        compiled_cells = ""
        if with_compiled:
            compiled = compiled_by.get((model, r["dtype"]))
            theirs_compiled = ok_ms(compiled)
            vs_compiled = theirs_compiled / mine if mine and theirs_compiled else None
            label = f" ({compiled['compile']})" if compiled is not None else ""
            compiled_cells = f" {num(theirs_compiled, '.2f')}{label} | {num(vs_compiled, '.2f')} |"
        lines.append(f"| {r['op']} | {variant_label(fmt, sp, r.get('bsr_block'))} | {r['dtype']} | {mine_text} | "
                     f"{num(theirs_dense, '.2f')} | {num(ok_ms(masked), '.2f') if fmt != 'dense' else '-'} | "
                     f"{num(speedup, '.2f')} |{compiled_cells} {human_bytes(state)} | {num(ratio, '.3f')}{mark} |")
        for who, rec in (("Coppice", r), ("PyTorch dense", dense), ("PyTorch masked", masked)):
            if rec is not None and rec.get("status") != "ok":
                note = f"{who} {r['op']} {variant_label(fmt, sp)} {r['dtype']}: {rec['status']}"
                if note not in notes:
                    notes.append(note)
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main(argv):
    return compare_main(argv, __doc__, "train", compare)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
