#!/usr/bin/env bash
# The shipped GPT sweep (configs/sweeps/gpt_frontier.yaml) through the real
# trainer on the CPU: a small model for 4 steps per run (the overrides of the
# file's CPU command), then its frontier. Every run must finish, and every
# point must have a time and a FLOPs count.
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
out="$tmp/out"
"$sweep" run configs/sweeps/gpt_frontier.yaml --out "$out" --max-steps 4 --set device=cpu \
  --set model.options.dim=128 --set model.options.layers=2 --set model.options.heads=4 \
  --set model.options.context=64 --set data.seq_len=64 --set data.batch_size=8 \
  --set evaluation.every_steps=2 --set evaluation.max_batches=2 --set logging.every_steps=2 >"$tmp/log" 2>&1
rc=$?
check "the sweep finishes (exit 0)" [ $rc -eq 0 ] || { cat "$tmp/log"; tail -n 5 "$out"/runs/*/trainer.log; }
for r in dense 'bsr_static_90__block_rows=32' 'bsr_static_90__block_rows=64' bsr_rigl_90; do
  check "$r finished" [ -s "$out/runs/$r/sweep_done.json" ]
done
"$sweep" frontier "$out" >"$tmp/log" 2>&1
rc=$?
check "frontier exits 0 (or 1 without gnuplot)" [ $rc -eq 0 -o \( $rc -eq 1 -a -z "$(command -v gnuplot)" \) ] || cat "$tmp/log"
python3 - "$out/frontier.jsonl" <<'PY' >"$tmp/check" 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 8, f"{len(rows)} points, want 2 evaluations of 4 runs"
assert all(r["time_s"] > 0 and r["flops"] > 0 and r["val_loss"] > 0 for r in rows), rows
dense = max(r["flops"] for r in rows if r["name"] == "dense")
sparse = max(r["flops"] for r in rows if r["name"] == "bsr_static_90__block_rows=32")
assert sparse < dense / 4, f"90 %-sparse FLOPs {sparse} against dense {dense}"
PY
check "every point has a time, FLOPs and a loss; sparse FLOPs are a fraction of dense" [ $? -eq 0 ] || cat "$tmp/check"
echo "sweep_smoke_test: $fails failed"
[ "$fails" -eq 0 ]
