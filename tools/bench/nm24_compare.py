#!/usr/bin/env python3
"""bench spmm's 2:4 rows beside torch_reference.py spmm's (to_sparse_semi_structured), as one markdown table.

    nm24_compare.py --coppice spmm_coppice.json [--torch spmm_torch.json] [--out table.md]

One row per (type, pattern, product): Coppice's time, its speedup over cuBLAS's dense product timed in the same
run (same shape and type), the fraction of the density-proportional ideal (speedup x 0.5: 2x is the ideal), and,
for the products PyTorch runs on a 2:4 weight, its to_sparse_semi_structured time and speedup over its own dense
F.linear.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def extra(r, key):
    return r.get(key)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coppice", required=True)
    p.add_argument("--torch", default="")
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    ours = load(a.coppice)
    theirs = load(a.torch) if a.torch else {"results": []}
    torch_rows = {(r["dtype"], r["op"]): r for r in theirs["results"]
                  if r.get("suite") == "spmm" and r.get("format") == "nm" and r.get("status") == "ok"}
    torch_dense = {r["dtype"]: r for r in theirs["results"]
                   if r.get("suite") == "spmm" and r.get("op") == "dense_linear" and r.get("status") == "ok"}
    lines = [f"Machine: {ours.get('gpu_name', '?')}; torch {theirs.get('torch_version', '-')}",
             "",
             "| type | pattern | product | ms | dense ms | speedup | of ideal | torch 2:4 ms | torch speedup |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in ours["results"]:
        if r.get("suite") != "spmm" or r.get("format") != "nm":
            continue
        pattern = "transposable" if extra(r, "transposable") else "magnitude"
        if r["status"] != "ok":
            lines.append(f"| {r['dtype']} | {pattern} | {r['op']} | {r['status']} | | | | | |")
            continue
        t = torch_rows.get((r["dtype"], r["op"]))
        td = torch_dense.get(r["dtype"])
        t_ms = f"{t['median_ms']:.4f}" if t else "-"
        t_sp = f"{td['median_ms'] / t['median_ms']:.2f}x" if t and td else "-"
        lines.append(f"| {r['dtype']} | {pattern} | {r['op']} | {r['median_ms']:.4f} | {extra(r, 'dense_ms'):.4f} | "
                     f"{extra(r, 'speedup'):.2f}x | {100 * extra(r, 'fraction_of_ideal'):.0f} % | {t_ms} | {t_sp} |")
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
