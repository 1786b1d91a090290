#!/usr/bin/env python3
"""Puts a Coppice bench report and a PyTorch one side by side.

    compare.py COPPICE.json TORCH.json

Rows are matched on (suite, op, device type, dtype, shape, format, sparsity); format and
sparsity are only in the sparse suites' rows (spmm, sddmm) and absent elsewhere. The ratio is Coppice's throughput
over PyTorch's: above 1 Coppice is faster. "% peak" is Coppice's fraction of the datasheet peak.

Masked attention rows also get a table of their own: each Coppice block-sparse row beside the PyTorch row of the
dense attention it leaves blocks out of (DENSE_PEER: same op, dtype and shape), by time, PyTorch's dense ms over
Coppice's sparse ms (issue 31: block-sparse attention at 75 % against PyTorch's dense SDPA).
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def device_type(label):
    return label.split(":", 1)[0]


def key(r):
    sparsity = r.get("sparsity")
    sparsity = None if sparsity is None else round(float(sparsity), 4)
    return (r.get("suite"), r.get("op"), device_type(r.get("device", "")), r.get("dtype"), tuple(r.get("shape", [])),
            r.get("format") or "", sparsity)


def layout_label(r):
    """The row's format and sparsity ("window 75%"), "" for rows with neither."""
    parts = [r["format"]] if r.get("format") else []
    if r.get("sparsity") is not None:
        parts.append(f"{100 * r['sparsity']:g}%")
    return " ".join(parts)


def shape_label(r):
    s = "x".join(map(str, r.get("shape", [])))
    layout = layout_label(r)
    return f"{s} {layout}" if layout else s


def throughput(r):
    if r is None or r.get("status") != "ok":
        return None, None
    if r.get("gflops") is not None:
        return r["gflops"], "GFLOP/s"
    if r.get("gbps") is not None:
        return r["gbps"], "GB/s"
    return None, None


def fmt(v, spec):
    if v is None:
        width = spec.split(".")[0]
        return "-".rjust(int(width) if width.isdigit() else 1)
    return format(v, spec)


def status_note(r):
    if r is None:
        return "missing"
    s = r.get("status", "")
    return "" if s == "ok" else s


# The dense attention format each masked one leaves blocks out of (tools/bench/attention_bench.cc's layouts).
DENSE_PEER = {"block_sparse": "causal", "window": "full"}


def sparse_vs_dense(coppice, torch):
    """Lines of the masked-attention table (none when no row has a measured dense peer)."""
    theirs = {(r.get("op"), r.get("dtype"), tuple(r.get("shape", [])), r.get("format")): r
              for r in torch.get("results", []) if r.get("suite") == "attention" and r.get("status") == "ok"}
    rows = []
    for r in coppice.get("results", []):
        peer_format = DENSE_PEER.get(r.get("format"))
        if r.get("suite") != "attention" or peer_format is None or r.get("status") != "ok":
            continue
        t = theirs.get((r.get("op"), r.get("dtype"), tuple(r.get("shape", [])), peer_format))
        if t is None:
            continue
        peer = peer_format + (f" ({t['backend']})" if t.get("backend") else "")
        rows.append(f"{r.get('dtype', ''):<5} {'x'.join(map(str, r.get('shape', []))):<16} {r.get('op', ''):<18} "
                    f"{layout_label(r):<20} {r['median_ms']:>11.4f} {peer:<18} {t['median_ms']:>10.4f} "
                    f"{t['median_ms'] / r['median_ms']:>8.2f}")
    if not rows:
        return []
    header = f"{'dtype':<5} {'shape':<16} {'op':<18} {'coppice':<20} {'coppice ms':>11} {'torch dense':<18} " \
             f"{'torch ms':>10} {'speedup':>8}"
    return ["", "block-sparse attention against PyTorch's dense attention of the same causality (speedup: torch ms "
            "/ coppice ms)", header, "-" * len(header)] + rows


def compare(coppice, torch):
    lines = []
    lines.append(f"coppice: {coppice.get('build', '?')} build; GPU '{coppice.get('gpu_name', '')}'; CPU '{coppice.get('cpu_name', '')}'")
    lines.append(f"pytorch: {torch.get('torch_version', '?')}; GPU '{torch.get('gpu_name', '')}'; {torch.get('settings', '')}")
    header = f"{'suite':<11} {'device':<6} {'dtype':<5} {'shape':<28} {'coppice ms':>11} {'torch ms':>10} " \
             f"{'coppice':>10} {'torch':>10} {'unit':<7} {'ratio':>6} {'% peak':>7}  note"
    lines.append(header)
    lines.append("-" * len(header))
    theirs = {key(r): r for r in torch.get("results", [])}
    seen = set()
    ratios = []
    for r in coppice.get("results", []):
        k = key(r)
        seen.add(k)
        t = theirs.get(k)
        ours_v, unit = throughput(r)
        theirs_v, unit_t = throughput(t)
        unit = unit or unit_t or ""
        ratio = ours_v / theirs_v if ours_v and theirs_v else None
        if ratio:
            ratios.append(ratio)
        frac = r.get("fraction_of_peak") if r.get("status") == "ok" else None
        notes = [n for n in (status_note(r), ("torch: " + status_note(t)) if status_note(t) else "") if n]
        shape = shape_label(r)
        lines.append(
            f"{r.get('suite', ''):<11} {r.get('device', ''):<6} {r.get('dtype', ''):<5} {shape:<28} "
            f"{fmt(r.get('median_ms') if ours_v else None, '11.4f')} {fmt(t.get('median_ms') if theirs_v else None, '10.4f')} "
            f"{fmt(ours_v, '10.1f')} {fmt(theirs_v, '10.1f')} {unit:<7} {fmt(ratio, '6.2f')} "
            f"{(fmt(100 * frac, '6.1f') + '%') if frac else fmt(None, '7')}  {'; '.join(notes)}")
    for k, t in theirs.items():
        if k not in seen:
            v, unit = throughput(t)
            shape = shape_label(t)
            lines.append(f"{t.get('suite', ''):<11} {t.get('device', ''):<6} {t.get('dtype', ''):<5} {shape:<28} "
                         f"{'-':>11} {fmt(t.get('median_ms') if v else None, '10.4f')} {'-':>10} {fmt(v, '10.1f')} "
                         f"{unit or '':<7} {'-':>6} {'-':>7}  only in the PyTorch report")
    if ratios:
        geo = 1.0
        for x in ratios:
            geo *= x
        geo **= 1.0 / len(ratios)
        lines.append(f"geometric mean of {len(ratios)} ratios (Coppice / PyTorch throughput): {geo:.3f}")
    else:
        lines.append("no row was measured by both")
    lines.extend(sparse_vs_dense(coppice, torch))
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(compare(load(argv[0]), load(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
