#!/usr/bin/env python3
"""Writes the GMP equal-time sweep from probe rates (issue 32).

  plan.py RATES_DIR OUT.yaml [--seeds 0,1] [--dense-seeds 0] [--steps 250]
  plan.py --ms DENSE,D1,D05 OUT.yaml ...   (the three probes' ms a step, as
                                            an earlier call's tools/sweep rates printed them)

RATES_DIR holds tools/sweep rates' probe runs of probe.yaml. A GMP run from
every 128x128 block (density 1.0) to half of them (0.5) takes N steps, pruning
every 100 steps from step 200 (after the warm-up) to N/3; its ms a step at
density d is interpolated linearly between the probes at 1.0 and 0.5 (a BSR
product's work is proportional to its stored blocks). N is the largest count
whose summed step times stay within dense's 3000 steps' time.
"""
import argparse, json, os, sys


def ms_per_step(run_dir, steps=250):
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if l.strip()]
    train = [r for r in recs if r.get("kind") == "train" and isinstance(r.get("step"), int) and isinstance(r.get("time_s"), (int, float))
             and r["step"] >= int(0.4 * steps)]
    a, b = train[0], train[-1]
    return 1000.0 * (b["time_s"] - a["time_s"]) / (b["step"] - a["step"])


def density_at(t, start, end, freq, d0=1.0, d1=0.5):
    if t < start:
        return d0
    if t >= end:
        return d1
    last = start + ((t - start) // freq) * freq  # the schedule's density holds between pruning steps
    f = (last - start) / (end - start)
    return d1 + (d0 - d1) * (1 - f) ** 3


def schedule(n):
    return 200, max(300, int(round(n / 3 / 100)) * 100), 100


def run_time_ms(n, ms1, ms05):
    start, end, freq = schedule(n)
    return sum(ms1 + (1.0 - density_at(t, start, end, freq)) / 0.5 * (ms05 - ms1) for t in range(n))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("rates_dir", nargs="?")
    p.add_argument("--ms", help="dense,d1.0,d0.5 ms a step instead of a RATES_DIR")
    p.add_argument("out")
    p.add_argument("--seeds", default="0,1", help="the GMP runs' seeds")
    p.add_argument("--dense-seeds", default="0", help="the dense runs' seeds (the first is the reference)")
    p.add_argument("--steps", type=int, default=250, help="the probes' steps (tools/sweep rates --steps)")
    a = p.parse_args()
    names = ("dense", "bsr128_d1.0", "bsr128_d0.5")
    if a.ms:
        ms = dict(zip(names, (float(v) for v in a.ms.split(","))))
    elif a.rates_dir:
        ms = {k: ms_per_step(os.path.join(a.rates_dir, "runs", k), a.steps) for k in names}
    else:
        p.error("give RATES_DIR or --ms")
    budget = 3000 * ms["dense"]
    n = 3000
    while run_time_ms(n + 60, ms["bsr128_d1.0"], ms["bsr128_d0.5"]) <= budget:
        n += 60
    start, end, freq = schedule(n)
    every = n // 6
    rule = ("          - regex: 'blocks\\.[0-9]+\\.(attn\\.(qkv|proj)|mlp\\.fc[12])\\.weight'\n"
            "            format: bsr\n            block_rows: 128\n")
    head = (f"# GMP at equal time (issue 32), written by tools/device/experiments/gmp_equal_time/plan.py\n"
            f"# from probe rates (ms a step): dense {ms['dense']:.2f}, 128x128 BSR at density 1.0 "
            f"{ms['bsr128_d1.0']:.2f}, at 0.5 {ms['bsr128_d0.5']:.2f}.\n"
            f"# GMP's {n} steps are estimated at {run_time_ms(n, ms['bsr128_d1.0'], ms['bsr128_d0.5']) / 1000:.1f} s, "
            f"dense's 3000 at {budget / 1000:.1f} s.\n")
    dense_seeds = a.dense_seeds.split(",")
    body = f"base: configs/gpt_dense.yaml\nreference: dense_seed{dense_seeds[0]}\nruns:\n"
    for s in dense_seeds:
        body += (f"  - name: dense_seed{s}\n    set: {{seed: {s}, training.steps: 3000, evaluation.every_steps: 500, "
                 f"checkpoint.every_steps: 3000}}\n")
    for s in a.seeds.split(","):
        body += (f"  - name: bsr128_gmp_d0.5_seed{s}\n    set:\n      seed: {s}\n      sparsity:\n"
                 f"        rules:\n{rule}"
                 f"      mask_update: {{method: gmp, start_step: {start}, end_step: {end}, frequency: {freq}, "
                 f"initial_density: 1.0, final_density: 0.5}}\n"
                 f"      training.steps: {n}\n      evaluation.every_steps: {every}\n      checkpoint.every_steps: {n}\n")
    with open(a.out, "w") as f:
        f.write(head + body)
    sys.stdout.write(head)


if __name__ == "__main__":
    main()
