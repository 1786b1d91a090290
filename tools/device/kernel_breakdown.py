#!/usr/bin/env python3
"""One training step's GPU time by kernel, from two Nsight Compute logs.

    kernel_breakdown.py ONE.csv TWO.csv [--top N]

ONE.csv and TWO.csv are `ncu --csv --metrics gpu__time_duration.sum` logs of
the same command run with one and with two timed steps (the same warm-up):
what TWO has more than ONE is exactly one step's kernels, without the set-up
and the first step's autotuning. Prints each kernel group's milliseconds and
share of the step, largest first, then the total. Groups are kernel names
with their template arguments cut (so one kernel at several tile shapes is
one row); ncu serializes kernels, so the sum is the step's GPU time without
overlap.
"""
import argparse
import collections
import csv
import re
import sys


def kernel_times(path):
    times = collections.Counter()
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own ==PROF== lines are not CSV
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
        times[group(row["Kernel Name"])] += value * scale
    return times


def group(name):
    name = name.replace("(anonymous namespace)::", "")
    while re.search(r"<[^<>]*>", name):  # template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return re.sub(r"\(.*", "", name).strip()[:90]  # parameters


def main():
    p = argparse.ArgumentParser()
    p.add_argument("one")
    p.add_argument("two")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    one, two = kernel_times(a.one), kernel_times(a.two)
    step = {k: two[k] - one.get(k, 0.0) for k in two}
    step = {k: v for k, v in step.items() if v > 1e-4}
    total = sum(step.values())
    if total <= 0:
        sys.exit("no kernel time differs between the two logs")
    print(f"| kernel | ms | share |\n|---|---:|---:|")
    for k, v in sorted(step.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"| `{k}` | {v:.3f} | {100 * v / total:.1f} % |")
    print(f"| **all kernels of one step** | **{total:.3f}** | 100 % |")


if __name__ == "__main__":
    main()
