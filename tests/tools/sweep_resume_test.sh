#!/usr/bin/env bash
# tools/sweep run resumes: finished runs are skipped, an interrupted or failed
# run is moved aside and run again, a finished run whose overrides changed is
# refused (nothing runs) unless --rerun names it. The trainer is a stub
# (sweep_fake_trainer.sh through SWEEP_TRAINER) that logs each run it does.
set -u
sweep="${1:?usage: sweep_resume_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
fake="${2:?usage: sweep_resume_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_resume_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$fake")"
export SWEEP_TRAINER FAKE_TRAINER_LOG="$tmp/ran"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
has() { grep -qF -- "$1" "$tmp/log"; }
ran() { [ "$(tr '\n' ' ' <"$tmp/ran" 2>/dev/null)" = "$1" ]; }  # the runs since the last `: >"$tmp/ran"`
field() { python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"; }
out="$tmp/out"
runs="$out/runs"
echo 'name: base_job' >"$tmp/base.yaml"
write_sweep() {  # write_sweep LR: runs a, b, c; a with optimizer.lr LR
  cat >"$tmp/sweep.yaml" <<YAML
base: $tmp/base.yaml
reference: a
runs:
  - name: a
    set: {optimizer.lr: $1}
  - name: b
    set: {sparsity.density: 0.1}
  - name: c
YAML
}
write_sweep 0.1

"$sweep" run "$tmp/sweep.yaml" --out "$out" >"$tmp/log" 2>&1
check "a fresh sweep exits 0" [ $? -eq 0 ]
check "it runs every run once, in order" ran "a b c "
for r in a b c; do
  check "$r has metrics, a log and sweep_done.json" [ -s "$runs/$r/metrics.jsonl" -a -s "$runs/$r/trainer.log" -a -s "$runs/$r/sweep_done.json" ]
done
d="$runs/b/sweep_done.json"
check "sweep_done.json: the name" [ "$(field "$d" name)" = '"b"' ]
check "sweep_done.json: the overrides" [ "$(field "$d" overrides)" = '{"sparsity.density": 0.1}' ]
check "sweep_done.json: exit code 0" [ "$(field "$d" exit_code)" = 0 ]
check "sweep_done.json: steps" [ "$(field "$d" steps)" = 4 ]
check "sweep_done.json: the trainer's time (last time_s)" [ "$(field "$d" train_time_s)" = 1.0 ]
check "sweep_done.json: the last evaluation's loss" [ "$(field "$d" val_loss)" = 2.65 ]
check "sweep_done.json: the process's wall-clock" python3 -c "import json; assert json.load(open('$d'))['wall_s'] > 0"
check "sweep_done.json: no FLOPs for a job without a model it counts" [ "$(field "$d" flops)" = null ]
check "the trainer's output is in its log" grep -q "fake trainer: b, 4 steps" "$runs/b/trainer.log"
check "no temporary files left" [ -z "$(find "$out" -name '.sweep_done.json.*')" ]
check "sweep.json names the reference" [ "$(field "$out/sweep.json" reference)" = '"a"' ]

: >"$tmp/ran"
"$sweep" run "$tmp/sweep.yaml" --out "$out" >"$tmp/log" 2>&1
check "the same command again exits 0" [ $? -eq 0 ]
check "and runs nothing" ran ""
check "it says each run is skipped" [ "$(grep -c 'finished before, skipped' "$tmp/log")" = 3 ]

# A run killed mid-way leaves its directory without sweep_done.json.
rm "$runs/b/sweep_done.json"
: >"$tmp/ran"
"$sweep" run "$tmp/sweep.yaml" --out "$out" >"$tmp/log" 2>&1
check "resuming after an interrupted run exits 0" [ $? -eq 0 ]
check "only the interrupted run runs again" ran "b "
check "the interrupted directory is moved aside" [ -s "$runs/b.interrupted.1/metrics.jsonl" -a ! -e "$runs/b.interrupted.1/sweep_done.json" ]
check "the rerun finished" [ -s "$runs/b/sweep_done.json" ]
check "the move is reported" has "moved aside to $runs/b.interrupted.1"

# A run that fails: the others still run, the sweep exits 1, the next one reruns it.
: >"$tmp/ran"
FAKE_TRAINER_FAIL=b "$sweep" run "$tmp/sweep.yaml" --out "$tmp/out2" >"$tmp/log" 2>&1
check "a failed run makes the sweep exit 1" [ $? -eq 1 ]
check "the runs after it still ran" ran "a b c "
check "the failed run has no sweep_done.json" [ ! -e "$tmp/out2/runs/b/sweep_done.json" ]
check "the failure names the run, its exit code and its log" has "b (exit 3, see $tmp/out2/runs/b/trainer.log)"
: >"$tmp/ran"
"$sweep" run "$tmp/sweep.yaml" --out "$tmp/out2" >"$tmp/log" 2>&1
check "the next sweep reruns the failed run (exit 0)" [ $? -eq 0 ]
check "only the failed run" ran "b "
check "the failed directory is moved aside" [ -d "$tmp/out2/runs/b.interrupted.1" ]

# Changed overrides for a finished run: refused, nothing runs.
write_sweep 0.2
rm -rf "$runs/c"
: >"$tmp/ran"
"$sweep" run "$tmp/sweep.yaml" --out "$out" >"$tmp/log" 2>&1
check "a changed override is refused (exit 2)" [ $? -eq 2 ]
check "the refusal names the run and the change" has "a: optimizer.lr: 0.1 -> 0.2"
check "the refusal says what to do" has "--rerun NAME"
check "nothing ran, not even the missing run" ran ""
"$sweep" run "$tmp/sweep.yaml" --out "$out" --max-steps 6 --rerun a >"$tmp/log" 2>&1
check "a changed --max-steps is refused too" has "b: max_steps: null -> 6"
echo 'name: base_job_edited' >"$tmp/base.yaml"
"$sweep" run "$tmp/sweep.yaml" --out "$out" --rerun a >"$tmp/log" 2>&1
check "an edited base job is refused" has "b: the base job $tmp/base.yaml was edited since"
echo 'name: base_job' >"$tmp/base.yaml"

"$sweep" run "$tmp/sweep.yaml" --out "$out" --rerun a >"$tmp/log" 2>&1
check "--rerun runs the changed run (exit 0)" [ $? -eq 0 ]
check "--rerun runs it and the missing one" ran "a c "
check "the old run is kept as a.previous.1" [ "$(field "$runs/a.previous.1/sweep_done.json" overrides)" = '{"optimizer.lr": 0.1}' ]
check "the new run records the new override" [ "$(field "$runs/a/sweep_done.json" overrides)" = '{"optimizer.lr": 0.2}' ]

checks_done sweep_resume_test
