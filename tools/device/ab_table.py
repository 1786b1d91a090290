#!/usr/bin/env python3
"""run_gpt.sh ab's and attention_ab's files as markdown: two builds of bench,
alternated in one call.

usage: ab_table.py OUT_DIR

Reads OUT_DIR/ab_step_{base,this}_<round>.json (bench train),
OUT_DIR/ab_bsr_{base,this}_<shape>.json (bench bsr) and
OUT_DIR/ab_att_{base,this}_<round>.json (bench attention) with
OUT_DIR/ab_att_torch.json (torch_reference.py attention). The steps: one row
per round and variant, base's and this build's ms a step and final loss, then
the medians over the rounds and their ratio (above 1: this build is faster).
The products: one row per weight and product, base's and this build's ms and
their ratio. Attention: one row per shape, layout and op, each build's ms in
every round, the ratio of their medians, and for a block-sparse layout
PyTorch's dense attention of the same causality over each build's median
(issue 31's anchor).
"""
import glob
import json
import os
import re
import statistics
import sys


def ok(path):
    try:
        return [r for r in json.load(open(path))["results"] if r.get("status") == "ok"]
    except (OSError, ValueError, KeyError):
        return []


def variant(r):
    block = r.get("block") or r.get("bsr_block")
    sparsity = r.get("sparsity")
    return (f"{r.get('op', '')} {r.get('format', '')}" + (f" {100 * sparsity:g} %" if sparsity else "") +
            (f" {block:.0f}x{block:.0f}" if block else ""))


def rounds_of(out, prefix):
    """The rounds of OUT_DIR/<prefix>_{base,this}_<round>.json, in order."""
    return sorted({int(m.group(1)) for p in glob.glob(os.path.join(out, f"{prefix}_*_*.json"))
                   if (m := re.search(r"_(\d+)\.json$", p))})


def steps(out):
    rounds = rounds_of(out, "ab_step")
    if not rounds:
        return
    rows, by = [], {}
    for n in rounds:
        sides = {s: {variant(r): r for r in ok(os.path.join(out, f"ab_step_{s}_{n}.json"))} for s in ("base", "this")}
        for v in sorted(set(sides["base"]) | set(sides["this"])):
            b, t = sides["base"].get(v), sides["this"].get(v)
            rows.append((n, v, b, t))
            for s, r in (("base", b), ("this", t)):
                if r is not None:
                    by.setdefault((v, s), []).append(r["median_ms"])
    print("| round | variant | base ms | this ms | base loss | this loss |")
    print("|---:|---|---:|---:|---:|---:|")
    fmt = lambda r, k, f: "-" if r is None or r.get(k) is None else format(r[k], f)  # noqa: E731
    for n, v, b, t in rows:
        print(f"| {n} | {v} | {fmt(b, 'median_ms', '.3f')} | {fmt(t, 'median_ms', '.3f')} |"
              f" {fmt(b, 'final_loss', '.5f')} | {fmt(t, 'final_loss', '.5f')} |")
    print()
    print("| variant | base median ms | this median ms | base / this |")
    print("|---|---:|---:|---:|")
    for v in sorted({v for v, _ in by}):
        b, t = by.get((v, "base")), by.get((v, "this"))
        mb = statistics.median(b) if b else None
        mt = statistics.median(t) if t else None
        ratio = f"{mb / mt:.3f}x" if mb and mt else "-"
        print(f"| {v} | {'-' if mb is None else f'{mb:.3f}'} | {'-' if mt is None else f'{mt:.3f}'} | {ratio} |")


def products(out):
    paths = sorted(glob.glob(os.path.join(out, "ab_bsr_this_*.json")))
    if not paths:
        return
    print()
    print("| weight [out, in] | product | base ms | this ms | base / this |")
    print("|---|---|---:|---:|---:|")
    for path in paths:
        key = lambda r: (tuple(r["shape"]), r["op"], r.get("block"), r.get("sparsity"))  # noqa: E731
        base = {key(r): r for r in ok(path.replace("ab_bsr_this_", "ab_bsr_base_")) if r.get("format") == "bsr"}
        for r in ok(path):
            if r.get("format") != "bsr":
                continue
            b = base.get(key(r))
            _, i, o = r["shape"]
            ratio = f"{b['median_ms'] / r['median_ms']:.3f}x" if b else "-"
            print(f"| {o} x {i} | {r['op']} | {'-' if b is None else format(b['median_ms'], '.4f')} |"
                  f" {r['median_ms']:.4f} | {ratio} |")


# The dense layout a block-sparse one is compared with: the same causality.
DENSE_PEER = {"block_sparse": "causal", "window": "full"}


def attention(out):
    rounds = rounds_of(out, "ab_att")
    if not rounds:
        return
    key = lambda r: (tuple(r["shape"]), r["format"], r["op"])  # noqa: E731
    times, order = {}, []
    for n in rounds:
        for side in ("base", "this"):
            for r in ok(os.path.join(out, f"ab_att_{side}_{n}.json")):
                if key(r) not in order:
                    order.append(key(r))
                times.setdefault((key(r), side), []).append(r["median_ms"])
    torch = {key(r): r["median_ms"] for r in ok(os.path.join(out, "ab_att_torch.json"))}
    print()
    print("| [B, H, T, d] | layout | op | base ms | this ms | base / this | PyTorch dense ms | over base | over this |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for k in order:
        shape, layout, op = k
        b, t = times.get((k, "base"), []), times.get((k, "this"), [])
        mb = statistics.median(b) if b else None
        mt = statistics.median(t) if t else None
        peer = torch.get((shape, DENSE_PEER[layout], op)) if layout in DENSE_PEER else None
        over = lambda m: "-" if peer is None or not m else f"{peer / m:.2f}x"  # noqa: E731
        print(f"| {', '.join(map(str, shape))} | {layout} | {op} | {', '.join(f'{x:.4f}' for x in b) or '-'} |"
              f" {', '.join(f'{x:.4f}' for x in t) or '-'} | {f'{mb / mt:.3f}x' if mb and mt else '-'} |"
              f" {'-' if peer is None else f'{peer:.4f}'} | {over(mb)} | {over(mt)} |")


def main(args):
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    steps(args[0])
    products(args[0])
    attention(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
