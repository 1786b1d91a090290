#!/usr/bin/env python3
"""bench spmm's 2:4 rows beside torch_reference.py spmm's (to_sparse_semi_structured), as one markdown table.

    nm24_compare.py --coppice spmm_coppice.json [--torch spmm_torch.json] [--out table.md]

One row per (type, pattern, product): Coppice's time, its speedup over cuBLAS's dense product timed in the same
run (same shape and type), the fraction of the density-proportional ideal (speedup x 0.5: 2x is the ideal), and,
for the products PyTorch runs on a 2:4 weight, its to_sparse_semi_structured time and speedup over its own dense
F.linear.
"""
import sys

from bsr_compare import emit, header, inputs, torch_cells


def main(argv):
    ours, theirs, out = inputs(argv, __doc__)
    torch_rows = {(r["dtype"], r["op"]): r for r in theirs["results"]
                  if r.get("suite") == "spmm" and r.get("format") == "nm" and r.get("status") == "ok"}
    torch_dense = {r["dtype"]: r for r in theirs["results"]
                   if r.get("suite") == "spmm" and r.get("op") == "dense_linear" and r.get("status") == "ok"}
    lines = header(ours, theirs) + [
        "| type | pattern | product | ms | dense ms | speedup | of ideal | torch 2:4 ms | torch speedup |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in ours["results"]:
        if r.get("suite") != "spmm" or r.get("format") != "nm":
            continue
        pattern = "transposable" if r.get("transposable") else "magnitude"
        if r["status"] != "ok":
            lines.append(f"| {r['dtype']} | {pattern} | {r['op']} | {r['status']} | | | | | |")
            continue
        t_ms, t_sp = torch_cells(torch_rows.get((r["dtype"], r["op"])), torch_dense.get(r["dtype"]))
        lines.append(f"| {r['dtype']} | {pattern} | {r['op']} | {r['median_ms']:.4f} | {r['dense_ms']:.4f} | "
                     f"{r['speedup']:.2f}x | {100 * r['fraction_of_ideal']:.0f} % | {t_ms} | {t_sp} |")
    emit(lines, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
