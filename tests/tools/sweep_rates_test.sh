#!/usr/bin/env bash
# tools/sweep rates: probe runs (the stub trainer, sweep_fake_trainer.sh,
# takes 0.5 s a step dense and 0.25 s sparse), their ms a step, the
# equal-time step counts, the sweep file it writes, runs whose rate changes
# (gmp, densify_step), and what it refuses.
set -u
sweep="${1:?usage: sweep_rates_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
fake="${2:?usage: sweep_rates_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_rates_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$fake")"
export SWEEP_TRAINER
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
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

# Runs whose rate changes during the run: gradual pruning (gmp) from every entry
# stored (the stub: 0.5 s a step) to half (0.25 s), and sparse-to-dense (0.25 s
# sparse, then 0.5 s dense). Each is probed at both ends and weighed over its
# schedule, scaled with its steps. gmp's 42 steps (start 8, end 25, every 4):
# 8 steps at 500 ms, then 4 at each density the cubic gives (1, 0.7236, 0.5742,
# 0.5127; one step at 0.5001), the rest at 250 ms: 14121 ms, nearer dense's
# 15000 than 48 steps' 16392. spdf's 48: 38 sparse steps and 10 dense, 14500.
cat >"$tmp/phased.yaml" <<YAML
base: $tmp/base.yaml
reference: dense
runs:
  - name: dense
  - name: gmp
    set:
      sparsity.rules: [{regex: fc, format: bsr, block_rows: 4}]
      mask_update: {method: gmp, start_step: 6, end_step: 18, frequency: 3, initial_density: 1.0, final_density: 0.5}
  - name: spdf
    set:
      sparsity.density: 0.25
      mask_update: {method: static, densify_step: 24, densify_warmup_steps: 3}
YAML
"$sweep" rates "$tmp/phased.yaml" --out "$tmp/phased" --steps 10 --round 6 --write "$tmp/phased_eq.yaml" >"$tmp/log" 2>&1
check "phased rates exits 0" [ $? -eq 0 ] || cat "$tmp/log"
check "each end of each phased run is probed, the phased runs themselves are not" \
  [ "$(ls "$tmp/phased/runs" | tr '\n' ' ')" = "dense gmp+final gmp+initial spdf+dense spdf+sparse " ]
python3 - "$tmp/phased/runs" <<'PY' >"$tmp/check" 2>&1
import json, os, sys
def overrides(name):
    return json.load(open(os.path.join(sys.argv[1], name, "sweep_done.json")))["overrides"]
first, last, dense = overrides("gmp+initial"), overrides("gmp+final"), overrides("spdf+dense")
# The unpruned probe is the run with its pruning moved past the probe.
assert first["mask_update"] == {"method": "gmp", "start_step": 29, "end_step": 30, "frequency": 3,
                                "initial_density": 1.0, "final_density": 0.5}, first
# The pruned one a fixed pattern at the final density, each weight alike; the dense one has no sparsity.
assert (last["sparsity.density"], last["sparsity.distribution"], last["mask_update"]) == \
    (0.5, "uniform", {"method": "static"}), last
assert "sparsity.density" not in dense and dense["sparsity"] == {} and dense["mask_update"] == {"method": "dense"}, dense
assert overrides("spdf+sparse")["mask_update"] == {"method": "static"}, overrides("spdf+sparse")
PY
check "the probes: gmp unpruned and at its final density, spdf sparse and dense" [ $? -eq 0 ] || cat "$tmp/check"
check "gmp: 336.22 ms a step on the mean, 42 steps" grep -Eq '^gmp +336\.22 +1\.487x +42$' "$tmp/log"
check "spdf: 302.08 ms a step on the mean, 48 steps" grep -Eq '^spdf +302\.08 +1\.655x +48$' "$tmp/log"
check "and the rates of each end" has "gmp: initial 500.00, final 250.00 ms a step"
python3 - "$tmp/phased_eq.yaml" <<'PY' >"$tmp/check" 2>&1
import sys, yaml
runs = {r["name"]: r["set"] for r in yaml.safe_load(open(sys.argv[1]))["runs"]}
gmp, spdf = runs["gmp"], runs["spdf"]
assert gmp["mask_update"]["start_step"] == 6, gmp  # the run's own, then the scaled ones after it
assert (gmp["training.steps"], gmp["mask_update.start_step"], gmp["mask_update.end_step"],
        gmp["mask_update.frequency"], gmp["evaluation.every_steps"]) == (42, 8, 25, 4, 14), gmp
assert list(gmp).index("mask_update.start_step") > list(gmp).index("mask_update"), list(gmp)
assert (spdf["training.steps"], spdf["mask_update.densify_step"], spdf["mask_update.densify_warmup_steps"]) == \
    (48, 38, 5), spdf
PY
check "the written sweep scales each schedule with its run" [ $? -eq 0 ] || cat "$tmp/check"
"$sweep" run "$tmp/phased_eq.yaml" --out "$tmp/phased_eq" --dry-run >"$tmp/log" 2>&1
check "and tools/sweep run takes it" [ $? -eq 0 ] || cat "$tmp/log"
printf 'base: %s\nreference: gmp\nruns:\n  - name: gmp\n    set: {mask_update: {method: gmp, start_step: 2, end_step: 8, frequency: 2, initial_density: 1.0, final_density: 0.5}}\n' \
  "$tmp/base.yaml" >"$tmp/gmp_ref.yaml"
"$sweep" rates "$tmp/gmp_ref.yaml" --out "$tmp/w" --steps 10 >"$tmp/log" 2>&1
check "a phased reference: exit 2" [ $? -eq 2 ]
check "and says why" has "the reference run 'gmp' changes its rate during the run"
printf 'base: %s\nreference: dense\nruns:\n  - name: dense\n  - name: both\n    set: {mask_update: {method: gmp, start_step: 2, end_step: 8, frequency: 2, initial_density: 1.0, final_density: 0.5, densify_step: 20}}\n' \
  "$tmp/base.yaml" >"$tmp/both.yaml"
"$sweep" rates "$tmp/both.yaml" --out "$tmp/v" --steps 10 >"$tmp/log" 2>&1
check "gmp with densify_step: exit 2" [ $? -eq 2 ]
check "and says to give its steps by hand" has "gmp with densify_step trains at three rates"
for bad in "frequency: 0|mask_update.frequency: expected a whole number >= 1" \
  "start_step: 8, end_step: 8|mask_update.end_step (8) must be > start_step (8)" \
  "start_step: 2.5|mask_update.start_step: expected a whole number >= 0"; do
  sched="${bad%%|*}" want="${bad#*|}"
  printf 'base: %s\nreference: dense\nruns:\n  - name: dense\n  - name: gmp\n    set: {mask_update: {method: gmp, start_step: 2, end_step: 8, frequency: 2, initial_density: 1.0, final_density: 0.5}}\n  - name: bad\n    set: {mask_update.method: gmp, mask_update.initial_density: 1.0, mask_update.final_density: 0.5, mask_update.start_step: 2, mask_update.end_step: 9, mask_update.frequency: 2}\n' \
    "$tmp/base.yaml" >"$tmp/bad.yaml"
  python3 - "$tmp/bad.yaml" "$sched" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["runs"][2]["set"].update({f"mask_update.{k}": v for k, v in yaml.safe_load("{" + sys.argv[2] + "}").items()})
yaml.safe_dump(doc, open(sys.argv[1], "w"))
PY
  FAKE_TRAINER_LOG="$tmp/bad_ran" "$sweep" rates "$tmp/bad.yaml" --out "$tmp/bad_out" --steps 5 >"$tmp/log" 2>&1
  check "gmp with $sched: exit 2, before any probe runs" [ $? -eq 2 -a ! -s "$tmp/bad_ran" ]
  check "and names it ($want)" has "$want"
done
"$sweep" rates "$tmp/phased.yaml" --out "$tmp/u" --steps 40 >"$tmp/log" 2>&1
check "a phased run no longer than the probes: exit 2" [ $? -eq 2 ]
check "and says why" has "its training.steps (30) must be more than the probes' --steps (40)"

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
checks_done sweep_rates_test
