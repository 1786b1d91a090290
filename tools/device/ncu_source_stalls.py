#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction: Nsight Compute's
source page (`ncu --import REP --page source --csv --print-source sass`, of a
report taken with `--section SourceCounters`) as markdown.

usage: ncu_source_stalls.py [--top N] NAME=CSV...

Each CSV holds one kernel's SASS, one table per profiled launch (a header row
from "Address" and its instructions); the launches of one CSV are summed
instruction by instruction (the same code at the same addresses). For each
NAME: the warp-stall samples in all, the opcodes that hold the most of them
(an opcode is the instruction's mnemonic with its modifiers, such as
SYNCS.PHASECHK.TRANS64.TRYWAIT, an mbarrier wait, WARPGROUP.DEPBAR.LE, a
wgmma wait, or BAR.SYNC), and the N instructions that do, each with its
largest stall reasons. The aggregate warp states (WarpStateStats) say why
the warps wait; this says at which wait of the source they do.
"""
import csv
import re
import sys
from collections import Counter

import ncu_csv

SAMPLES = ("Warp Stall Sampling (All Samples)", "# Samples")
REASON_PREFIXES = ("smsp__pcsamp_warps_issue_stalled_", "stall_")
PREDICATE = re.compile(r"^@!?\w+\s+")


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def reason_columns(header):
    """(index, short name) of each stall reason's sample column (not-issued halves left out)."""
    out = []
    for i, name in enumerate(header):
        for prefix in REASON_PREFIXES:
            # the not-issued halves (a suffix "_not_issued" or " (Not Issued)") are parts of the whole
            if name.startswith(prefix) and "not_issued" not in name.lower().replace(" ", "_").replace("-", "_"):
                out.append((i, name[len(prefix):]))
                break
    return out


def opcode(source):
    words = PREDICATE.sub("", source.strip()).split()
    return words[0].rstrip(";") if words else "?"


def read(path, who):
    """The instructions of every table in path, summed by (address, source):
    {key: [samples, Counter of reasons]} in first-seen order, and the table count."""
    found, tables, columns = {}, 0, None
    for row in csv.reader(ncu_csv.lines(path, who)):
        if row and row[0].lstrip("# ") == "Address":
            sample = next((row.index(c) for c in SAMPLES if c in row), None)
            if sample is None or "Source" not in row:
                sys.exit(f"{who}: {path}: a source table without {SAMPLES[0]!r} or 'Source' columns (collect "
                         f"--section SourceCounters, export --page source --print-source sass); columns: {row}")
            columns = (row.index("Source"), sample, reason_columns(row), len(row))
            tables += 1
            continue
        if columns is None or len(row) != columns[3]:
            continue  # before the first table, or a title row between tables
        source_at, sample_at, reasons, _ = columns
        entry = found.setdefault((row[0], row[source_at].strip()), [0.0, Counter()])
        entry[0] += number(row[sample_at])
        for i, name in reasons:
            entry[1][name] += number(row[i])
    if tables == 0:
        sys.exit(f"{who}: {path}: no source table (a header row starting with 'Address')")
    return found, tables


def reasons_text(counter, total, count=3):
    """The largest reasons' shares of total; what the reason columns leave
    unnamed (wgmma's own waits, where the export has no column for them) as "unnamed"."""
    counter = Counter(counter)
    unnamed = total - sum(counter.values())
    if unnamed > 0.005 * total:
        counter["unnamed"] = unnamed
    top = [(n, v) for n, v in counter.most_common(count) if v > 0]
    return ", ".join(f"{n} {100 * v / total:.0f} %" for n, v in top) if total else "-"


def summary(name, path, top):
    found, tables = read(path, "ncu_source_stalls.py")
    total = sum(v[0] for v in found.values())
    print(f"### {name}: {total:.0f} warp-stall samples over {tables} launch{'es' if tables != 1 else ''}")
    print()
    if total == 0:
        print("No samples (was the report taken with --section SourceCounters?).")
        print()
        return
    by_op, op_reasons = Counter(), {}
    for (_, source), (samples, reasons) in found.items():
        op = opcode(source)
        by_op[op] += samples
        op_reasons.setdefault(op, Counter()).update(reasons)
    print("| opcode | share of samples | its largest stall reasons |")
    print("|---|---:|---|")
    for op, samples in by_op.most_common(top):
        print(f"| {op} | {100 * samples / total:.1f} % | {reasons_text(op_reasons[op], samples)} |")
    print()
    print("| address | instruction | share of samples | its largest stall reasons |")
    print("|---|---|---:|---|")
    ranked = sorted(found.items(), key=lambda kv: -kv[1][0])[:top]
    for (address, source), (samples, reasons) in ranked:
        text = source if len(source) <= 70 else source[:67] + "..."
        print(f"| {address} | `{text}` | {100 * samples / total:.1f} % | {reasons_text(reasons, samples)} |")
    print()


def main(args):
    top = 12
    if args[:1] == ["--top"] and len(args) > 1:
        try:
            top = int(args[1])
        except ValueError:
            top = 0
        args = args[2:]
    named = [a.split("=", 1) for a in args]
    if top < 1 or not named or any(len(n) != 2 or not n[0] or not n[1] for n in named):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for name, path in named:
        summary(name, path, top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
