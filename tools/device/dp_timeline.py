#!/usr/bin/env python3
"""Where a data-parallel step's time goes, per GPU, from CUPTI activity traces.

    dp_timeline.py TRACE_DIR [--skip N] [--label TEXT]

TRACE_DIR holds tools/device/cupti_trace.so's files of a training run, one
trace.<pid>.tsv per process (every rank of a launch). Steps are cut at the
optimizer's kernels (a cluster of them ends each step), and for each GPU
this prints, as medians over the steps after the first --skip (default 10),
in milliseconds:

  step          from one step's last optimizer kernel to the next one's
  gpu busy      the union of every kernel and copy on that GPU in the step
  idle          step - gpu busy: the GPU waits (for the host, a launch,
                a synchronization, another rank)
  compute       the union of the kernels that are not NCCL's
  nccl          the union of NCCL's kernels (the all-reduces; a kernel
                waiting for the other rank counts)
  nccl exposed  NCCL time with no compute kernel running beside it: what
                the exchange adds to the step
  tail          from the backward pass's last compute kernel to the first
                optimizer kernel: the wait for the last bucket
  copies        device-to-device copies and copy kernels (buckets in and out)

and the counts of NCCL kernels and of idle gaps over 20 us per step. A
1-GPU run gives the baseline (no NCCL). The markdown table goes to stdout;
with --gaps K, then each GPU's K largest kinds of idle gap: the kernels on
either side, how many steps have one, its median length, and the runtime
API call the host was in when the gap began (the tracer records them; a
synchronizing call, such as cudaFree or a pageable copy, that lasts until the
GPU drains, is why the GPU then waits for the host), or "host code".
"""

import argparse
import collections
import glob
import gzip
import os
import re
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
    a = [(s, e) for s, e in a if e > lo and s < hi]
    b = sorted((s, e) for s, e in b if e > lo and s < hi)
    return union_ns(a, lo, hi) - union_ns(list(_intersections(a, b)), lo, hi)


def _intersections(a, b_sorted):
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


def read_traces(path):
    """{(pid, device): {"kernels": [(start, end, name)], "copies": [(start, end)], "api": [(start, end, name)]}}:
    a process's runtime API calls (R records) in each of its devices' entries. path: a directory of
    trace.<pid>.tsv files, or one trace file, plain or gzipped (a trace kept for later)."""
    devices, api = {}, {}
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "trace.*.tsv")))
    else:
        files = [path] if os.path.isfile(path) else []
    if not files:
        sys.exit(f"{path}: no trace.*.tsv (was CUDA_INJECTION64_PATH set to cupti_trace.so?)")
    for trace in files:
        pid = os.path.basename(trace).split(".")[1]
        with gzip.open(trace, "rt") if trace.endswith(".gz") else open(trace) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 5)
                if len(parts) != 6:
                    continue
                kind, start, end, dev, _stream, name = parts
                if kind == "R":
                    api.setdefault(pid, []).append((int(start), int(end), name))
                    continue
                entry = devices.setdefault((pid, int(dev)), {"kernels": [], "copies": []})
                if kind == "K":
                    entry["kernels"].append((int(start), int(end), name))
                elif kind == "M" and name.split()[1] == "8":  # CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
                    entry["copies"].append((int(start), int(end)))
    for (pid, _dev), entry in devices.items():
        entry["kernels"].sort()
        entry["api"] = sorted(api.get(pid, []))
    return devices


def optimizer_clusters(kernels):
    """(start, end) of each cluster of optimizer kernels (one per step)."""
    clusters = []
    for s, e, name in kernels:
        if not OPTIMIZER.search(name):
            continue
        if clusters and s - clusters[-1][1] < CLUSTER_GAP_NS:
            clusters[-1] = (clusters[-1][0], max(clusters[-1][1], e))
        else:
            clusters.append((s, e))
    return clusters


def step_ends(kernels):
    """The end of each cluster of optimizer kernels."""
    return [e for _, e in optimizer_clusters(kernels)]


def analyse(device):
    kernels, copies = device["kernels"], device["copies"]
    clusters = optimizer_clusters(kernels)
    ends = [e for _, e in clusters]
    opt_starts = [s for s, _ in clusters]
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


def short_name(name):
    """A mangled kernel name's first identifiers ("_ZN7coppice4cuda12gemm_kernelIf..." -> "coppice::cuda::gemm_kernel")."""
    if not name.startswith("_Z"):
        return name[:60]
    nested = name.startswith("_ZN")
    parts, i = [], 3 if nested else 2
    while i < len(name) and name[i].isdigit() and len(parts) < (4 if nested else 1):
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j : j + n])
        i = j + n
    return "::".join(parts) if parts else name[:60]


def host_call_at(api, t):
    """The runtime API call the host was in at time t ("host code" if none), and its length in ns."""
    inside = [(e - s, name) for s, e, name in api if s <= t < e]
    return max(inside) if inside else (0, "host code")


def gap_kinds(device, skip):
    """{(before, after): [(gap ns, host call name, its ns) per step that has one]} over the steps after `skip`."""
    kernels = device["kernels"]
    ends = step_ends(kernels)[skip:]
    spans = sorted([(s, e, short_name(n)) for s, e, n in kernels] + [(s, e, "memcpy") for s, e in device["copies"]])
    kinds = {}
    for lo, hi in zip(ends, ends[1:]):
        inside = [x for x in spans if lo <= x[0] < hi]
        reach, before = lo, "(step start)"
        per_step = {}
        for s, e, name in inside:
            if s - reach > IDLE_GAP_NS:
                ns, host, host_ns = per_step.get((before, name), (0, None, 0))
                if host is None:
                    host_ns, host = host_call_at(device["api"], reach)
                per_step[(before, name)] = (ns + s - reach, host, host_ns)
            if e > reach:
                reach, before = e, name
        for key, ns in per_step.items():
            kinds.setdefault(key, []).append(ns)
    return kinds


COLUMNS = ["step", "busy", "idle", "compute", "nccl", "exposed", "tail", "copies"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", help="the directory of trace.<pid>.tsv files")
    parser.add_argument("--skip", type=int, default=10, help="steps left out at the start (warm-up)")
    parser.add_argument("--label", default="", help="a name for the rows")
    parser.add_argument("--gaps", type=int, default=0, help="list each GPU's K largest kinds of idle gap")
    args = parser.parse_args()
    devices = read_traces(args.traces)
    print(
        "| run | GPU | steps | step ms | GPU busy | idle | compute | nccl | nccl exposed | tail | copies "
        "| nccl kernels | idle gaps > 20 us |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(devices):
        dev = f"{key[1]} (pid {key[0]})"
        rows = analyse(devices[key])[args.skip :]
        if not rows:
            print(f"| {args.label} | {dev} | 0 | (fewer steps than --skip, or no optimizer kernel found) |")
            continue
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        cells = " | ".join(f"{med[k] / 1e6:.3f}" for k in COLUMNS)
        print(f"| {args.label} | {dev} | {len(rows)} | {cells} | {med['nccl_kernels']:.0f} | {med['idle_gaps']:.0f} |")
    if args.gaps <= 0:
        return
    for key in sorted(devices):
        kinds = gap_kinds(devices[key], args.skip)
        ranked = sorted(kinds.items(), key=lambda kv: -sum(ns for ns, _, _ in kv[1]))[: args.gaps]
        print()
        print(f"{args.label}, GPU {key[1]} (pid {key[0]}): the largest idle gaps (total over the steps first)")
        print()
        print("| kernel before the gap | kernel after it | steps with it | median us | total ms | host in, as it began |")
        print("|---|---|---:|---:|---:|---|")
        for (before, after), found in ranked:
            ns = [n for n, _, _ in found]
            hosts = collections.Counter(h for _, h, _ in found)
            host, count = hosts.most_common(1)[0]
            call_us = statistics.median(c for _, h, c in found if h == host) / 1e3
            where = host if host == "host code" else f"{host} ({call_us:.0f} us)"
            if count < len(found):
                where += f" in {count} of {len(found)}"
            print(
                f"| {before} | {after} | {len(ns)} | {statistics.median(ns) / 1e3:.0f} | {sum(ns) / 1e6:.2f} | {where} |"
            )


if __name__ == "__main__":
    main()
