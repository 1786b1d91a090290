#!/usr/bin/env python3
"""Puts the data-parallel benchmark of Coppice (bench dp) beside PyTorch DDP's (torch_ddp.py), as markdown.

    dp_compare.py --coppice WORLD1.json [WORLD2.json ...] [--torch TORCH.json] [--out TABLE.md]

Each Coppice report is one `bench dp` run (rank 0's JSON; one file per world size, or several worlds in one).
Rows: every (variant, world size) Coppice measured; beside each, PyTorch's run of the same job: dense
against dense, compact and densified (CSR at 90 %) against masked (a dense weight times a fixed mask).
Step ms is the slowest rank's median step time (the job's pace); samples/s counts every rank's batch;
scaling efficiency is t(1 GPU) / t(N GPUs) (weak scaling: each GPU its own batch, so 1.00 is perfect);
bytes per step are what one rank hands to the collectives per step (0 on one GPU: no exchange).
"""
import argparse
import json
import sys

TORCH_PEER = {"dense": "dense", "compact": "masked", "densified": "masked"}
EFFICIENCY_TARGET = 0.90


def load_records(paths, suite="dp"):
    """The records of `suite` in the JSON reports at `paths`, and the reports' first machine and version fields."""
    out = []
    meta = {}
    for p in paths:
        try:
            with open(p) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            out.append({"_load_error": f"{p}: {e}"})
            continue
        for k in ("gpu_name", "cpu_name", "torch_version", "build", "settings", "nccl_version"):
            if report.get(k) and k not in meta:
                meta[k] = report[k]
        out.extend(r for r in report.get("results", []) if r.get("suite") == suite)
    return out, meta


def index(records):
    """(op, world) -> record; a later record of the same key wins unless it failed and the earlier did not."""
    table = {}
    for r in records:
        if "_load_error" in r:
            continue
        key = (r.get("op"), int(r.get("world_size") or 1))
        old = table.get(key)
        if old is None or old.get("status") != "ok" or r.get("status") == "ok":
            table[key] = r
    return table


def step_ms(r):
    if r is None or r.get("status") != "ok":
        return None
    return r.get("slowest_rank_median_ms") or r.get("median_ms")


def num(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def human_bytes(b):
    if b is None:
        return "-"
    b = float(b)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def efficiency(table, op, world):
    t1 = step_ms(table.get((op, 1)))
    tn = step_ms(table.get((op, world)))
    if world == 1:
        return 1.0 if t1 else None
    return t1 / tn if t1 and tn else None


def note_of(r, who):
    if r is None:
        return f"{who}: missing"
    s = r.get("status", "")
    return "" if s == "ok" else f"{who}: {s}"


def compare(coppice_records, torch_records, meta):
    ours = index(coppice_records)
    theirs = index(torch_records)
    lines = []
    for r in coppice_records + torch_records:
        if "_load_error" in r:
            lines.append(f"- could not read {r['_load_error']}")
    device = meta.get("gpu_name") or (f"none (CPU {meta['cpu_name']})" if meta.get("cpu_name") else "?")
    lines.append(f"GPU: {device}; Coppice {meta.get('build', '?')} build; PyTorch {meta.get('torch_version', '?')}"
                 f"{' (NCCL ' + meta['nccl_version'] + ')' if meta.get('nccl_version') else ''}; "
                 f"{meta.get('settings', '')}")
    lines.append("")
    lines.append("| variant | GPUs | step ms | samples/s | scaling eff. | bytes/step/rank | PyTorch DDP | step ms | "
                 "samples/s | scaling eff. | bytes/step/rank | Coppice / PyTorch speed | note |")
    lines.append("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    order = {"dense": 0, "compact": 1, "densified": 2}
    keys = sorted(ours, key=lambda k: (order.get(k[0], 9), k[0] or "", k[1]))
    for op, world in keys:
        r = ours[(op, world)]
        peer = TORCH_PEER.get(op, op)
        t = theirs.get((peer, world))
        ms, tms = step_ms(r), step_ms(t)
        sps = r.get("samples_per_s") if ms else None
        tsps = t.get("samples_per_s") if tms else None
        eff, teff = efficiency(ours, op, world), efficiency(theirs, peer, world)
        b = r.get("exchange_bytes_per_step") if ms else None
        tb = t.get("exchange_bytes_per_step") if tms else None
        speed = tms / ms if ms and tms else None
        label = op + (f" {100 * r['sparsity']:g} %" if r.get("sparsity") is not None else "")
        tlabel = peer + (f" {100 * t['sparsity']:g} %" if t and t.get("sparsity") is not None else "")
        notes = "; ".join(n for n in (note_of(r, "coppice"), note_of(t, "torch")) if n)
        lines.append(f"| {label} | {world} | {num(ms, '.2f')} | {num(sps, '.0f')} | {num(eff, '.2f')} | "
                     f"{human_bytes(b)} | {tlabel} | {num(tms, '.2f')} | {num(tsps, '.0f')} | {num(teff, '.2f')} | "
                     f"{human_bytes(tb)} | {num(speed, '.2f')} | {notes} |")
    lines.append("")
    lines.append("Checks:")
    worlds = sorted({w for _, w in ours if w > 1})
    for w in worlds:
        dense_b = (ours.get(("densified", w)) or {}).get("exchange_bytes_per_step")
        compact_b = (ours.get(("compact", w)) or {}).get("exchange_bytes_per_step")
        dense_ok = step_ms(ours.get(("densified", w))) is not None
        compact_ok = step_ms(ours.get(("compact", w))) is not None
        if dense_ok and compact_ok and compact_b:
            lines.append(f"- bytes per step on {w} GPUs, densified / compact: {human_bytes(dense_b)} / "
                         f"{human_bytes(compact_b)} = {dense_b / compact_b:.2f}x fewer with the compact exchange "
                         f"(expect about 10x at 90 %)")
        else:
            lines.append(f"- bytes per step on {w} GPUs: compact or densified not measured")
        for op in ("dense", "compact", "densified"):
            e = efficiency(ours, op, w)
            if e is None:
                lines.append(f"- scaling efficiency {op} 1 -> {w} GPUs: not measured")
            else:
                verdict = "meets" if e >= EFFICIENCY_TARGET else "BELOW"
                lines.append(f"- scaling efficiency {op} 1 -> {w} GPUs: {e:.3f} ({verdict} the {EFFICIENCY_TARGET:.0%} "
                             f"target)")
        for peer in ("dense", "masked"):
            e = efficiency(theirs, peer, w)
            if e is not None:
                lines.append(f"- PyTorch DDP scaling efficiency {peer} 1 -> {w} GPUs: {e:.3f}")
    if not worlds:
        lines.append("- no multi-GPU Coppice record")
    return "\n".join(lines) + "\n"


def compare_main(argv, doc, suite, compare_fn):
    """The command line of dp_compare.py and train_compare.py: --coppice JSON... [--torch JSON...] [--out MD];
    prints compare_fn(ours, theirs, meta) and writes it to --out."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coppice", nargs="+", required=True)
    p.add_argument("--torch", nargs="*", default=[])
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    ours, meta = load_records(a.coppice, suite)
    theirs, tmeta = load_records(a.torch, suite)
    for k, v in tmeta.items():
        meta.setdefault(k, v)
    text = compare_fn(ours, theirs, meta)
    print(text, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


def main(argv):
    return compare_main(argv, __doc__, "dp", compare)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
