#!/usr/bin/env bash
# tools/sweep rates: probe runs (the stub trainer, sweep_fake_trainer.sh,
# takes 0.5 s a step dense and 0.25 s sparse), their ms a step, the
# equal-time step counts, the sweep file it writes, and what it refuses.
set -u
sweep="${1:?usage: sweep_rates_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
fake="${2:?usage: sweep_rates_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_rates_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$fake")"
export SWEEP_TRAINER
fails=0
check() {  # check NAME CONDITION...
  local name="$1"; shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
has() { grep -qF -- "$1" "$tmp/log"; }

printf 'model: {name: gpt}\ntraining: {steps: 30}\nevaluation: {every_steps: 10}\n' >"$tmp/base.yaml"
cat >"$tmp/sweep.yaml" <<YAML
base: $tmp/base.yaml
reference: dense
runs:
  - name: dense
  - name: sparse
    set: {sparsity.density: 0.1}
YAML
"$sweep" rates "$tmp/sweep.yaml" --out "$tmp/probe" --steps 10 --round 6 --write "$tmp/eq.yaml" >"$tmp/log" 2>&1
check "rates exits 0" [ $? -eq 0 ] || cat "$tmp/log"
check "dense: 500 ms a step, 30 steps" grep -Eq '^dense +500\.00 +1\.000x +30$' "$tmp/log"
check "sparse: 250 ms a step, twice the steps" grep -Eq '^sparse +250\.00 +2\.000x +60$' "$tmp/log"
check "the probes ran 10 steps without evaluations or checkpoints" \
  grep -q 'evaluation.every_steps=0' "$tmp/probe/runs/sparse/sweep_done.json"
python3 - "$tmp/eq.yaml" <<'PY' >"$tmp/check" 2>&1
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
runs = {r["name"]: r["set"] for r in doc["runs"]}
assert doc["reference"] == "dense", doc
assert runs["dense"] == {"training.steps": 30, "checkpoint.every_steps": 30, "evaluation.every_steps": 10}, runs
assert runs["sparse"] == {"sparsity.density": 0.1, "training.steps": 60, "checkpoint.every_steps": 60,
                          "evaluation.every_steps": 20}, runs
PY
check "the written sweep: each run's counts, evaluations as many as the reference's" [ $? -eq 0 ] || cat "$tmp/check"
"$sweep" run "$tmp/eq.yaml" --out "$tmp/eq" --dry-run >"$tmp/log" 2>&1
check "the written sweep is one tools/sweep run takes" [ $? -eq 0 ] || cat "$tmp/log"
check "with the sparse run's steps" has "training.steps=60"

# Resumed: the finished probes are not run again.
FAKE_TRAINER_LOG="$tmp/ran" "$sweep" rates "$tmp/sweep.yaml" --out "$tmp/probe" --steps 10 --round 6 >"$tmp/log" 2>&1
check "a second rates resumes (exit 0)" [ $? -eq 0 ]
check "and runs no probe again" [ ! -s "$tmp/ran" ]

# Refused: no reference; a reference without training.steps; probes too short to time.
sed '/^reference:/d' "$tmp/sweep.yaml" >"$tmp/noref.yaml"
"$sweep" rates "$tmp/noref.yaml" --out "$tmp/x" >"$tmp/log" 2>&1
check "no reference: exit 2" [ $? -eq 2 ]
check "and says why" has "reference: missing"
printf 'model: {name: gpt}\ntraining: {epochs: 2}\n' >"$tmp/epochs.yaml"
sed "s|base: .*|base: $tmp/epochs.yaml|" "$tmp/sweep.yaml" >"$tmp/epochs_sweep.yaml"
"$sweep" rates "$tmp/epochs_sweep.yaml" --out "$tmp/y" >"$tmp/log" 2>&1
check "a reference without training.steps: exit 2" [ $? -eq 2 ]
check "and says so" has "training.steps"
"$sweep" rates "$tmp/sweep.yaml" --out "$tmp/z" --steps 2 >"$tmp/log" 2>&1
check "--steps below 5: exit 2" [ $? -eq 2 ]
echo "sweep_rates_test: $fails failed"
[ "$fails" -eq 0 ]
