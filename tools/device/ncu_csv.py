"""Reading Nsight Compute's `--csv` logs, for kernel_breakdown.py and ncu_bound.py."""
import csv
import sys

# Nsight Compute's units of gpu__time_duration, in milliseconds (its CSV
# spells them either way, by version).
UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3,
           "s": 1e3}


def lines(path, who):
    """The CSV lines of the ncu log at path (ncu's own ==PROF== lines, and the
    program's, are not CSV); exits naming `who` and the log if unreadable."""
    try:
        with open(path, newline="") as f:
            return [l for l in f if l.startswith('"')]
    except OSError as e:
        sys.exit(f"{who}: {path}: {e.strerror}")


def rows(path, who):
    """The metric rows (dicts by column) of the ncu CSV log at path; exits naming `who` and the log if unreadable."""
    return list(csv.DictReader(lines(path, who)))
