#!/usr/bin/env python3
"""Where a data-parallel step's time goes, per GPU, from an Nsight Systems trace.

    dp_timeline.py REPORT.sqlite [--skip N] [--label TEXT]

REPORT.sqlite is `nsys profile --trace=cuda --export=sqlite` of a training
run (every rank of it: nsys follows tools/launch's children). Steps are cut
at the optimizer's kernels (a cluster of them ends each step), and for each
GPU this prints, as medians over the steps after the first --skip (default
10), in milliseconds:

  step          from one step's last optimizer kernel to the next one's
  gpu busy      the union of every kernel and copy on that GPU in the step
  idle          step - gpu busy: the GPU waits (for the host, a launch,
                a synchronization, another rank)
  compute       the union of the kernels that are not NCCL's
  nccl          the union of NCCL's kernels (the all-reduces)
  nccl exposed  NCCL time with no compute kernel running beside it: what
                the exchange adds to the step
  tail          from the backward pass's last compute kernel to the first
                optimizer kernel: the wait for the last bucket
  copies        device-to-device copies and copy kernels (buckets in and out)

and the counts of NCCL kernels and of idle gaps over 20 us per step. One
trace's GPUs are told apart by deviceId; a 1-GPU trace gives the baseline
(no NCCL). The markdown table goes to stdout.
"""

import argparse
import re
import sqlite3
import statistics
import sys

OPTIMIZER = re.compile(r"multi_step_kernel|sgd_kernel|sgd_mixed|adam_kernel|adam_mixed")
NCCL = re.compile(r"nccl", re.IGNORECASE)
COPY = re.compile(r"copy", re.IGNORECASE)
CLUSTER_GAP_NS = 1_000_000  # optimizer kernels closer than 1 ms are one step's
IDLE_GAP_NS = 20_000


def union_ns(intervals, lo, hi):
    """Total length of the union of [start, end) intervals clipped to [lo, hi)."""
    spans = sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi)
    total, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def minus_ns(a, b, lo, hi):
    """Length of union(a) not covered by union(b), within [lo, hi)."""
    return union_ns(a, lo, hi) - union_ns(list(_intersections(a, b)), lo, hi)


def _intersections(a, b):
    b_sorted = sorted(b)
    for s, e in a:
        for bs, be in b_sorted:
            if bs >= e:
                break
            if be > s:
                yield max(s, bs), min(e, be)


def gaps(intervals, lo, hi, min_ns):
    spans = sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi)
    count, cur = 0, lo
    for s, e in spans:
        if s - cur > min_ns:
            count += 1
        cur = max(cur, e)
    return count


def table_columns(db, table):
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def read_trace(path):
    """{deviceId: {"kernels": [(start, end, name)], "copies": [(start, end)]}}."""
    db = sqlite3.connect(path)
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        sys.exit(f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table (tables: {sorted(tables)}); was --trace=cuda on?")
    cols = table_columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    names = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
    devices = {}
    for start, end, dev, name in db.execute(
        f"SELECT start, end, deviceId, {name_col} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"
    ):
        text = names.get(name, str(name)) if isinstance(name, int) else str(name)
        devices.setdefault(dev, {"kernels": [], "copies": []})["kernels"].append((start, end, text))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        mcols = table_columns(db, "CUPTI_ACTIVITY_KIND_MEMCPY")
        kind = "copyKind" if "copyKind" in mcols else None
        query = f"SELECT start, end, deviceId{', ' + kind if kind else ''} FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        for row in db.execute(query):
            start, end, dev = row[:3]
            # copyKind 8 is device to device (CUPTI_ACTIVITY_MEMCPY_KIND_DTOD).
            if kind is None or row[3] == 8:
                devices.setdefault(dev, {"kernels": [], "copies": []})["copies"].append((start, end))
    return devices


def step_ends(kernels):
    """The end of each cluster of optimizer kernels."""
    ends, last = [], None
    for s, e, name in kernels:
        if not OPTIMIZER.search(name):
            continue
        if last is not None and s - last[1] < CLUSTER_GAP_NS:
            last = (last[0], e)
            ends[-1] = e
        else:
            last = (s, e)
            ends.append(e)
    return ends


def optimizer_starts(kernels):
    starts, last_end = [], None
    for s, e, name in kernels:
        if not OPTIMIZER.search(name):
            continue
        if last_end is None or s - last_end >= CLUSTER_GAP_NS:
            starts.append(s)
        last_end = e
    return starts


def analyse(device):
    kernels, copies = device["kernels"], device["copies"]
    ends = step_ends(kernels)
    opt_starts = optimizer_starts(kernels)
    compute = [(s, e) for s, e, n in kernels if not NCCL.search(n)]
    nccl = [(s, e) for s, e, n in kernels if NCCL.search(n)]
    copy_kernels = [(s, e) for s, e, n in kernels if COPY.search(n)] + copies
    everything = [(s, e) for s, e, _ in kernels] + copies
    backward = [(s, e) for s, e, n in kernels if not NCCL.search(n) and not OPTIMIZER.search(n)]
    rows = []
    for lo, hi in zip(ends, ends[1:]):
        step = hi - lo
        busy = union_ns(everything, lo, hi)
        opt = [s for s in opt_starts if lo < s < hi]
        first_opt = opt[0] if opt else hi
        last_back = max((e for s, e in backward if lo < e <= first_opt), default=first_opt)
        rows.append(
            {
                "step": step,
                "busy": busy,
                "idle": step - busy,
                "compute": union_ns(compute, lo, hi),
                "nccl": union_ns(nccl, lo, hi),
                "exposed": minus_ns(nccl, compute, lo, hi),
                "tail": first_opt - last_back,
                "copies": union_ns(copy_kernels, lo, hi),
                "nccl_kernels": sum(1 for s, e in nccl if lo <= s < hi),
                "idle_gaps": gaps(everything, lo, hi, IDLE_GAP_NS),
            }
        )
    return rows


COLUMNS = ["step", "busy", "idle", "compute", "nccl", "exposed", "tail", "copies"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report")
    parser.add_argument("--skip", type=int, default=10, help="steps left out at the start (warm-up)")
    parser.add_argument("--label", default="", help="a name for the rows")
    args = parser.parse_args()
    devices = read_trace(args.report)
    if not devices:
        sys.exit(f"{args.report}: no kernels")
    print(
        "| run | GPU | steps | step ms | GPU busy | idle | compute | nccl | nccl exposed | tail | copies "
        "| nccl kernels | idle gaps > 20 us |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dev in sorted(devices):
        rows = analyse(devices[dev])[args.skip :]
        if not rows:
            print(f"| {args.label} | {dev} | 0 | (fewer steps than --skip, or no optimizer kernel found) |")
            continue
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        cells = " | ".join(f"{med[k] / 1e6:.3f}" for k in COLUMNS)
        print(f"| {args.label} | {dev} | {len(rows)} | {cells} | {med['nccl_kernels']:.0f} | {med['idle_gaps']:.0f} |")


if __name__ == "__main__":
    main()
