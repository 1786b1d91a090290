#!/usr/bin/env python3
"""The BSR products of `bench bsr --json` files as one markdown table.

usage: bsr_product_table.py [PIN=]FILE.json ...

Each row: the weight [out, in], the product, block, sparsity, ms, the ratio to
cuBLAS's dense x W^T in the same call, the fraction of the density-proportional
ideal (speedup x density) and of the byte floor (the product's bytes at the
rate of a copy of x). A file given as PIN=FILE (run_gpt.sh blocks: the
COPPICE_ROUTES bsr_tiles pin it ran under) adds a "kernel pin" column.
"""
import json
import sys


def cell(r, key, fmt, scale=1.0):
    v = r.get(key)
    return "-" if v is None else format(scale * v, fmt)


def main(args):
    files = [a.split("=", 1) if "=" in a else ("", a) for a in args]
    pinned = any(pin for pin, _ in files)
    print("| weight [out, in] | product | block | sparsity |" + (" kernel pin |" if pinned else "") +
          " ms | vs cuBLAS | of the density-proportional ideal | byte floor ms | of the byte floor |")
    print("|---|---|---:|---:|" + ("---|" if pinned else "") + "---:|---:|---:|---:|---:|")
    for pin, path in files:
        for r in json.load(open(path))["results"]:
            if r.get("status") != "ok" or r.get("format") != "bsr":
                continue
            n, i, o = r["shape"]
            print(f"| {o} x {i} | {r['op']} | {r.get('block', 0):.0f} | {100 * r['sparsity']:.0f} % |" +
                  (f" {pin} |" if pinned else "") +
                  f" {r['median_ms']:.4f} | {cell(r, 'speedup', '.2f')}x | {cell(r, 'fraction_of_ideal', '.0f', 100)} % |"
                  f" {cell(r, 'byte_floor_ms', '.4f')} | {cell(r, 'fraction_of_byte_floor', '.0f', 100)} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
