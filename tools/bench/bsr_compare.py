#!/usr/bin/env python3
"""bench bsr's rows beside torch_reference.py bsr's, as one markdown table.

    bsr_compare.py --coppice bsr_coppice.json [--torch bsr_torch.json] [--out table.md]

One row per (type, block, sparsity, product): Coppice's time, its speedup over the dense product
timed in the same run (cuBLAS, same shape and type), the fraction of the density-proportional
ideal (speedup x density), and for the forward product PyTorch's Triton BSR time and its speedup
over PyTorch's dense F.linear in its own run.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def inputs(argv, doc):
    """(ours, theirs, out path) from --coppice, --torch and --out; theirs is empty without --torch."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coppice", required=True)
    p.add_argument("--torch", default="")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    return load(a.coppice), load(a.torch) if a.torch else {"results": []}, a.out


def header(ours, theirs):
    return [f"Machine: {ours.get('gpu_name', '?')}; torch {theirs.get('torch_version', '-')}", ""]


def torch_cells(t, td):
    """PyTorch's time for a row and its speedup over its own dense product, as two table cells ("-" where absent)."""
    t_ms = f"{t['median_ms']:.4f}" if t else "-"
    t_sp = f"{td['median_ms'] / t['median_ms']:.2f}x" if t and td else "-"
    return t_ms, t_sp


def emit(lines, out):
    """Writes the table to `out` (if given) and to stdout."""
    text = "\n".join(lines) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    sys.stdout.write(text)


def main(argv):
    ours, theirs, out = inputs(argv, __doc__)
    torch_rows = {(r["dtype"], r.get("block"), r.get("sparsity")): r for r in theirs["results"]
                  if r.get("op") == "linear" and r.get("status") == "ok"}
    torch_dense = {r["dtype"]: r for r in theirs["results"] if r.get("op") == "dense_linear" and r["status"] == "ok"}
    lines = header(ours, theirs) + [
        "| type | block | sparsity | product | ms | dense ms | speedup | of ideal | torch BSR ms | torch speedup |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in ours["results"]:
        if r.get("suite") != "bsr" or r.get("format") != "bsr":
            continue
        key = (r["dtype"], r.get("block"), r.get("sparsity"))
        if r["status"] != "ok":
            lines.append(f"| {r['dtype']} | {r.get('block')} | {r['sparsity']:.2f} | {r['op']} | {r['status']} |"
                         " | | | | |")
            continue
        t_ms, t_sp = torch_cells(torch_rows.get(key) if r["op"] == "linear" else None, torch_dense.get(r["dtype"]))
        lines.append(f"| {r['dtype']} | {r['block']:.0f} | {r['sparsity']:.2f} | {r['op']} | {r['median_ms']:.4f} | "
                     f"{r['dense_ms']:.4f} | {r['speedup']:.2f}x | {100 * r['fraction_of_ideal']:.0f} % | {t_ms} | {t_sp} |")
    emit(lines, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
