#!/usr/bin/env python3
"""What bounds a kernel, from Nsight Compute: one row a profiled launch.

    ncu_bound.py LOG.csv [LOG.csv ...]

Each LOG is an `ncu --csv --metrics METRICS` log (run_gpt.sh bound's
METRICS: duration, the L2's and DRAM's throughput as % of peak, L2 sectors
read by the SMs, DRAM bytes read and written, the SMs' throughput). Prints a
Markdown table: the log, the kernel (its name without template arguments),
and those figures, with the L2's sectors as megabytes (32 bytes a sector),
so that they can be set against a kernel's count of its own reads.
"""
import sys

import ncu_csv

METRICS = {  # ncu metric -> its column
    "gpu__time_duration.sum": "us",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 % of peak",
    "lts__t_sectors_srcunit_tex_op_read.sum": "L2 reads MB",
    "dram__bytes_read.sum": "DRAM read MB",
    "dram__bytes_write.sum": "DRAM write MB",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % of peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM % of peak",
}
TIME_US = {unit: ms * 1e3 for unit, ms in ncu_csv.UNIT_MS.items()}
BYTES_MB = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "KB": 1e-3, "MB": 1.0, "GB": 1e3}


def value(metric, unit, text):
    """The metric's value in its column's unit; ValueError names what it cannot read."""
    v = float(text.replace(",", ""))
    units = TIME_US if metric == "gpu__time_duration.sum" else BYTES_MB if metric.startswith("dram__bytes") else None
    if units is not None:
        if unit not in units:
            raise ValueError(f"unknown unit {unit!r}")
        return v * units[unit]
    if metric == "lts__t_sectors_srcunit_tex_op_read.sum":
        return v * 32e-6  # sectors of 32 bytes
    return v


def rows(path):
    launches = {}
    for r in ncu_csv.rows(path, "ncu_bound"):
        metric = r.get("Metric Name")
        if metric not in METRICS:
            continue
        key = (r["ID"], r["Kernel Name"].split("<")[0].split("::")[-1].split("(")[0])  # the bare name
        try:
            launches.setdefault(key, {})[metric] = value(metric, r.get("Metric Unit", ""), r["Metric Value"])
        except (KeyError, ValueError) as e:
            sys.exit(f"ncu_bound: {path}: {metric}: cannot read {r.get('Metric Value')!r} {r.get('Metric Unit')!r}: {e}")
    return launches


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cols = list(METRICS.values())
    print("| log | kernel | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    for path in sys.argv[1:]:
        launches = rows(path)
        log = path.rsplit("/", 1)[-1]
        if not launches:
            print(f"| {log} | (no launch profiled) |" + " |" * len(cols))
        for (_, name), m in launches.items():
            cells = [f"{m[k]:.1f}" if k in m else "-" for k in METRICS]
            print(f"| {log} | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
