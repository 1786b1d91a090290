#!/usr/bin/env python3
"""Issue 30's cost of the non-finite check: the trainer before (d5d1c29, no
check) and after, on the same jobs, alternating runs in one call.

    compare_steps.py BEFORE AFTER REPS JOB.yaml... > table.md

Each run's step time is the median over its metrics windows (logging.every_steps
10) after the first two (warm-up); each side's figure is the median over REPS runs."""
import json, os, statistics, subprocess, sys

before, after, reps, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
out = os.environ.get("OUT", "/tmp")
rows, raw = [], {}
for job in jobs:
    name = os.path.basename(job)[:-5]
    times = {"before": [], "after": []}
    for rep in range(reps):
        order = [("before", before), ("after", after)] if rep % 2 == 0 else [("after", after), ("before", before)]
        for side, binary in order:
            metrics = f"/tmp/{name}_{side}_{rep}.jsonl"
            if os.path.exists(metrics):
                os.remove(metrics)
            r = subprocess.run([binary, "--config", job, "--set", f"logging.metrics={metrics}"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name} {side} rep {rep}: exit {r.returncode}: {r.stderr.strip()[-400:]}", file=sys.stderr)
                continue
            recs = [json.loads(l) for l in open(metrics) if '"kind":"train"' in l]
            ms = [1000 * (b["time_s"] - a["time_s"]) / (b["step"] - a["step"]) for a, b in zip(recs, recs[1:])]
            ms = ms[2:]
            if ms:
                times[side].append(statistics.median(ms))
    raw[name] = times
    if times["before"] and times["after"]:
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        rows.append(f"| {name} | {b:.3f} | {a:.3f} | {100 * (a - b) / b:+.2f} % | "
                    f"{', '.join(f'{x:.3f}' for x in times['before'])} | {', '.join(f'{x:.3f}' for x in times['after'])} |")
print("| job | before ms/step | after ms/step | after vs before | before runs | after runs |")
print("|---|---:|---:|---:|---|---|")
print("\n".join(rows))
json.dump(raw, open(os.path.join(out, "steps_raw.json"), "w"), indent=1)
