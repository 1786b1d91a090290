#!/usr/bin/env python3
"""Two training runs' GPU time a step by kernel, side by side, from CUPTI traces.

    trace_kernel_sums.py A B [--step-kernel REGEX] [--window LO HI] [--top N]

A and B are tools/device/cupti_trace.so's output of two runs of the same
model (a trace directory of trace.<pid>.tsv files, or one such file, plain
or .gz): say static's and block RigL's pattern, or one route against
another. Only kernel records in the middle of each run count (--window, as
fractions of the run's kernel time span; default 0.3 0.9), so start-up,
autotuning, a mask update at step 0 and the last checkpoint stay out; a
step is a launch of --step-kernel (default embedding_sums: the token
embedding's gradient, once a GPT step). Prints, largest difference first,
each kernel's milliseconds and launches a step in A and in B. Kernels on two
streams (a weight gradient beside the input gradient) each count whole, so
the totals exceed the step, and a kernel that runs beside another is
slower than alone: read a difference together with what ran beside it.
"""
import argparse
import collections
import re
import subprocess

import dp_timeline


def records(path):
    """(start ns, end ns, mangled name) of every kernel record under path, on any device."""
    out = [k for entry in dp_timeline.read_traces(path).values() for k in entry["kernels"]]
    if not out:
        raise SystemExit(f"{path}: no kernel records")
    return out


def demangled(names):
    """name -> readable name: demangled, the parameter list and namespaces cut."""
    names = sorted(names)
    try:
        text = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    except OSError:  # no binutils: the mangled names as they are
        text = names
    short = {}
    for n, d in zip(names, text + [""] * len(names)):
        d = (d or n).replace("(anonymous namespace)::", "").replace("coppice::", "")
        short[n] = re.sub(r"\([^()]*\)$", "", d)
    return short


def per_step(path, recs, window, step_kernel, short):
    """kernel -> (ms a step, launches a step) over the window of path's records, and the steps counted."""
    t0 = min(r[0] for r in recs)
    t1 = max(r[1] for r in recs)
    lo, hi = t0 + (t1 - t0) * window[0], t0 + (t1 - t0) * window[1]
    sums = collections.defaultdict(lambda: [0.0, 0])
    for start, end, name in recs:
        if lo <= start < hi:
            s = sums[name]
            s[0] += (end - start) / 1e6
            s[1] += 1
    steps = sum(v[1] for n, v in sums.items() if re.search(step_kernel, short.get(n, n)))
    if steps == 0:
        raise SystemExit(f"{path}: no launch of --step-kernel {step_kernel!r} in the window")
    return {n: (v[0] / steps, v[1] / steps) for n, v in sums.items()}, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--step-kernel", default="embedding_sums")
    ap.add_argument("--window", nargs=2, type=float, default=[0.3, 0.9], metavar=("LO", "HI"))
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    if not 0 <= args.window[0] < args.window[1] <= 1:
        raise SystemExit(f"--window {args.window[0]} {args.window[1]}: need 0 <= LO < HI <= 1")
    recs_a, recs_b = records(args.a), records(args.b)
    short = demangled({r[2] for r in recs_a + recs_b})
    a, na = per_step(args.a, recs_a, args.window, args.step_kernel, short)
    b, nb = per_step(args.b, recs_b, args.window, args.step_kernel, short)
    zero = (0.0, 0.0)
    print(f"A: {args.a} ({na} steps in the window); B: {args.b} ({nb} steps)\n")
    print("| kernel | A ms a step (launches) | B ms a step (launches) | B - A ms |")
    print("|---|---:|---:|---:|")
    rows = sorted(set(a) | set(b), key=lambda n: -abs(b.get(n, zero)[0] - a.get(n, zero)[0]))
    for n in rows[: args.top]:
        x, y = a.get(n, zero), b.get(n, zero)
        print(f"| {short[n][:160]} | {x[0]:.3f} ({x[1]:.1f}) | {y[0]:.3f} ({y[1]:.1f}) | {y[0] - x[0]:+.3f} |")
    ta, tb = sum(v[0] for v in a.values()), sum(v[0] for v in b.values())
    print(f"| all kernels | {ta:.3f} | {tb:.3f} | {tb - ta:+.3f} |")


if __name__ == "__main__":
    main()
