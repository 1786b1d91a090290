#!/usr/bin/env python3
"""One training step's GPU time by kernel, from two Nsight Compute logs.

    kernel_breakdown.py ONE.csv TWO.csv [--top N] [--launches REGEX]

ONE.csv and TWO.csv are `ncu --csv --metrics gpu__time_duration.sum` logs of
the same command run with one and with two timed steps (the same warm-up):
what TWO has more than ONE is exactly one step's kernels, without the set-up
and the first step's autotuning. Prints each kernel group's milliseconds and
share of the step, largest first, then the total. Groups are kernel names
with their template arguments cut (so one kernel at several tile shapes is
one row); ncu serializes kernels, so the sum is the step's GPU time without
overlap.

--launches REGEX adds a second table for the kernels whose name matches
REGEX: one step's launches grouped by their template arguments and grid, so
that one kernel's shapes and products stand apart (a BSR product's tile
and direction, and its grid's block rows, say which linear it ran).
"""
import argparse
import collections
import re
import sys

import ncu_csv


def launches(path):
    """(kernel name, grid, milliseconds) of every launch in an ncu CSV log."""
    out = []
    for row in ncu_csv.rows(path, "kernel_breakdown"):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        if unit not in ncu_csv.UNIT_MS:
            sys.exit(f"kernel_breakdown: {path}: unknown time unit {unit!r}")
        value = float(row["Metric Value"].replace(",", "")) * ncu_csv.UNIT_MS[unit]
        out.append((row["Kernel Name"], row.get("Grid Size", ""), value))
    if not out:
        sys.exit(f"kernel_breakdown: {path}: no gpu__time_duration.sum rows (an ncu --csv log of that metric?)")
    return out


def kernel_times(rows):
    """{kernel group: ms} of launches' rows."""
    times = collections.Counter()
    for name, _, ms in rows:
        times[group(name)] += ms
    return times


def launch_times(rows, pattern):
    """{(kernel with its template arguments, grid): [launches, ms]} of the rows whose kernel matches pattern."""
    times = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, ms in rows:
        if pattern.search(name):
            key = (with_arguments(name), grid)
            times[key][0] += 1
            times[key][1] += ms
    return times


def with_arguments(name):
    """The kernel's name and template arguments, without namespaces or parameters."""
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    depth = 0
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\b[A-Za-z_]\w*::", "", name)
    return re.sub(r"^void ", "", name).strip()


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
    p.add_argument("--launches", metavar="REGEX", help="also list these kernels' launches by template arguments and grid")
    a = p.parse_args()
    try:
        pattern = re.compile(a.launches) if a.launches else None
    except re.error as e:
        p.error(f"--launches: {a.launches!r} is not a regular expression: {e}")
    one_rows, two_rows = launches(a.one), launches(a.two)  # each log read once, for both tables
    one, two = kernel_times(one_rows), kernel_times(two_rows)
    step = {k: two[k] - one.get(k, 0.0) for k in two}
    step = {k: v for k, v in step.items() if v > 1e-4}
    total = sum(step.values())
    if total <= 0:
        sys.exit("no kernel time differs between the two logs")
    print(f"| kernel | ms | share |\n|---|---:|---:|")
    for k, v in sorted(step.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"| `{k}` | {v:.3f} | {100 * v / total:.1f} % |")
    print(f"| **all kernels of one step** | **{total:.3f}** | 100 % |")
    if pattern is None:
        return
    one_l, two_l = launch_times(one_rows, pattern), launch_times(two_rows, pattern)
    rows = []
    for key, (count, ms) in two_l.items():
        count1, ms1 = one_l.get(key, [0, 0.0])
        if count > count1:
            rows.append((key, count - count1, ms - ms1))
    print(f"\n| launches of `{a.launches}` | grid | a step | ms | share of the step |\n|---|---|---:|---:|---:|")
    for (name, grid), count, ms in sorted(rows, key=lambda r: -r[2]):
        print(f"| `{name}` | {grid} | {count} | {ms:.3f} | {100 * ms / total:.1f} % |")
    if not rows:
        print(f"| (no launch of a kernel matching `{a.launches}` in one step) | | | | |")


if __name__ == "__main__":
    main()
