#!/usr/bin/env bash
# The shipped GPT sweeps (configs/sweeps/gpt_frontier.yaml and
# gpt_equal_time.yaml) through the real trainer on the CPU: a small model for
# 4 steps per run (the overrides of gpt_frontier.yaml's CPU command), then
# each frontier. Every run must finish, and every point must have a time and
# a FLOPs count.
set -u
sweep="${1:?usage: sweep_smoke_test.sh path/to/tools/sweep path/to/trainer}"
trainer="${2:?usage: sweep_smoke_test.sh path/to/tools/sweep path/to/trainer}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_smoke_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$trainer")"
export SWEEP_TRAINER COPPICE_NUM_THREADS=1
fails=0
check() {  # check NAME CONDITION...
  local name="$1"; shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
for file in gpt_frontier gpt_equal_time; do
  out="$tmp/$file"
  "$sweep" run "configs/sweeps/$file.yaml" --out "$out" --max-steps 4 --set device=cpu \
    --set model.options.dim=128 --set model.options.layers=2 --set model.options.heads=4 \
    --set model.options.context=64 --set data.seq_len=64 --set data.batch_size=8 \
    --set evaluation.every_steps=2 --set evaluation.max_batches=2 --set logging.every_steps=2 >"$tmp/log" 2>&1
  rc=$?
  check "$file: the sweep finishes (exit 0)" [ $rc -eq 0 ] || { cat "$tmp/log"; tail -n 5 "$out"/runs/*/trainer.log; }
  runs=$("$sweep" run "configs/sweeps/$file.yaml" --out "$tmp/dry_$file" --dry-run | sed -n 's/^\([^ ]*\): to run$/\1/p')
  check "$file: the dry run lists its runs" [ -n "$runs" ]
  for r in $runs; do
    check "$file: $r finished" [ -s "$out/runs/$r/sweep_done.json" ]
  done
  "$sweep" frontier "$out" >"$tmp/log" 2>&1
  rc=$?
  check "$file: frontier exits 0 (or 1 without gnuplot)" [ $rc -eq 0 -o \( $rc -eq 1 -a -z "$(command -v gnuplot)" \) ] ||
    cat "$tmp/log"
  python3 - "$out/frontier.jsonl" $runs <<'PY' >"$tmp/check" 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = sys.argv[2:]
assert len(rows) == 2 * len(names), f"{len(rows)} points, want 2 evaluations of {len(names)} runs"
assert all(r["time_s"] > 0 and r["flops"] > 0 and r["val_loss"] > 0 for r in rows), rows
flops = {r["name"]: max(q["flops"] for q in rows if q["name"] == r["name"]) for r in rows}
dense = flops["dense" if "dense" in flops else "dense_s3000"]
for name, f in flops.items():  # with --max-steps every run takes 4 steps: FLOPs follow the density
    if "_90" in name or "d0.1" in name:
        assert f < dense / 4, f"{name}: 90 %-sparse FLOPs {f} against dense {dense}"
    if "nm24" in name:
        assert dense * 0.4 < f < dense * 0.6, f"{name}: 2:4 FLOPs {f} against dense {dense}"
PY
  check "$file: every point has a time, FLOPs and a loss; sparse FLOPs follow the density" [ $? -eq 0 ] ||
    cat "$tmp/check"
done
echo "sweep_smoke_test: $fails failed"
[ "$fails" -eq 0 ]
