#!/usr/bin/env bash
# The shipped GPT sweeps (configs/sweeps/gpt_frontier.yaml, gpt_equal_time.yaml,
# gpt_equal_time_wgmma.yaml, gpt_equal_time_wgmma_followup.yaml,
# gpt_equal_time_gmp.yaml, gpt_equal_time_bsr128_seeds.yaml and
# gpt_schedules.yaml) through the real trainer on the CPU: a small model
# for 4 steps per run (the overrides of gpt_frontier.yaml's CPU command), then
# each frontier. Every run must finish, and every point must have a time and
# a FLOPs count that follows the run's density. Then the job files of
# gpt_schedules.yaml: each run's overrides are its file's sections, and each
# file trains a few steps with its schedule moved inside them (GMP prunes to
# its final density, SPDF's weights end dense). Every run reads one folder
# of the GPT's corpus (PCI/, 216 KB) instead of all 24 MB: reading and
# cutting the whole corpus took about half of each run's 3 s.
set -u
sweep="${1:?usage: sweep_smoke_test.sh path/to/tools/sweep path/to/trainer}"
trainer="${2:?usage: sweep_smoke_test.sh path/to/tools/sweep path/to/trainer}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_smoke_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$trainer")"
export SWEEP_TRAINER COPPICE_NUM_THREADS=1
corpus=/usr/share/doc/linux-doc-6.1/html/_sources/PCI
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
for file in gpt_frontier gpt_equal_time gpt_equal_time_wgmma gpt_equal_time_wgmma_followup gpt_equal_time_gmp \
  gpt_equal_time_bsr128_seeds \
  gpt_schedules; do
  out="$tmp/$file"
  "$sweep" run "configs/sweeps/$file.yaml" --out "$out" --max-steps 4 --set device=cpu \
    --set model.options.dim=128 --set model.options.layers=2 --set model.options.heads=4 \
    --set model.options.context=64 --set data.seq_len=64 --set data.batch_size=8 \
    --set evaluation.every_steps=2 --set evaluation.max_batches=2 --set logging.every_steps=2 \
    --set "data.path=$corpus" >"$tmp/log" 2>&1
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
dense = flops[min(n for n in flops if n.startswith("dense"))]  # dense, dense_s3000, dense_seed2, ...
for name, f in flops.items():  # with --max-steps every run takes 4 steps: FLOPs follow the density
    if "_90" in name or "d0.1" in name:
        assert f < dense / 4, f"{name}: 90 %-sparse FLOPs {f} against dense {dense}"
    if "nm24" in name:
        assert dense * 0.4 < f < dense * 0.6, f"{name}: 2:4 FLOPs {f} against dense {dense}"
    if "wide" in name or "gmp" in name:  # iso-FLOP; GMP has not begun to prune
        assert f == dense, f"{name}: FLOPs {f} against dense {dense}"
    if "spdf" in name:  # density 0.25 of the block linears until it densifies (the small
        # model's 128-wide weights hold 1 to 4 128x128 blocks: rounded, up to a third)
        assert dense / 4 <= f <= dense / 3, f"{name}: FLOPs {f} against dense {dense}"
PY
  check "$file: every point has a time, FLOPs and a loss; sparse FLOPs follow the density" [ $? -eq 0 ] ||
    cat "$tmp/check"
done

# Each run of gpt_schedules.yaml named after a job file (bsr64_gmp:
# configs/gpt_bsr64_gmp.yaml; dense: the base itself) overrides the base into
# that file's model, sparsity and mask_update, so that the sweep measures
# the shipped jobs.
python3 - "$sweep" configs/sweeps/gpt_schedules.yaml <<'PY' >"$tmp/check" 2>&1
import importlib.machinery, importlib.util, os, sys, yaml
loader = importlib.machinery.SourceFileLoader("sweep", sys.argv[1])
spec = importlib.util.spec_from_loader("sweep", loader)
sweep = importlib.util.module_from_spec(spec)
loader.exec_module(sweep)
s = sweep.load_sweep(sys.argv[2], {}, None)
checked = 0
for run in s["runs"]:
    job = f"configs/gpt_{run['name']}.yaml"
    if not os.path.exists(job):
        continue
    tree = yaml.safe_load(open(job))
    for section in ("model", "sparsity", "mask_update"):
        got = sweep.job_value(s["base_tree"], run["overrides"], section)
        assert got == tree.get(section), f"{run['name']}: {section} is {got}, {job} has {tree.get(section)}"
    checked += 1
assert checked == 4, f"{checked} runs have a job file, want dense, bsr64_gmp, bsr64_spdf and bsr64_wide_x2"
PY
check "gpt_schedules: its runs are the job files" [ $? -eq 0 ] || cat "$tmp/check"

# The job files themselves, small, their schedules inside a few steps.
small=(--set device=cpu --set model.options.dim=128 --set model.options.layers=2 --set model.options.heads=4
  --set model.options.context=64 --set data.seq_len=64 --set data.batch_size=8 --set evaluation.every_steps=0
  --set lr_schedule.warmup_steps=1 --set logging.progress=true --set logging.every_steps=1 --set "data.path=$corpus")
declare -A schedule=(
  [gmp]="--set training.steps=6 --set mask_update.start_step=1 --set mask_update.end_step=4 --set mask_update.frequency=1"
  [spdf]="--set training.steps=5 --set mask_update.densify_step=3"
  [wide_x2]="--set training.steps=3")
for job in gmp spdf wide_x2; do
  out="$tmp/job_$job"
  # shellcheck disable=SC2086 # the schedule's words are separate arguments
  "$trainer" --config "configs/gpt_bsr64_$job.yaml" "${small[@]}" ${schedule[$job]} \
    --set "logging.metrics=$out/metrics.jsonl" --set "checkpoint.dir=$out/checkpoints" >"$out.log" 2>&1
  check "gpt_bsr64_$job.yaml: trains (exit 0)" [ $? -eq 0 ] || tail -n 5 "$out.log"
done
python3 - "$tmp" <<'PY' >"$tmp/check" 2>&1
import json, sys
def records(job):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/job_{job}/metrics.jsonl")]
ruled = lambda d: {k: v for k, v in d.items() if k.startswith("blocks.") and k.endswith(".weight")}
gmp = [r for r in records("gmp") if r["kind"] == "train"]
assert set(ruled(gmp[0]["density"]).values()) == {1.0}, gmp[0]["density"]
assert set(ruled(gmp[-1]["density"]).values()) == {0.25}, gmp[-1]["density"]
spdf = [r for r in records("spdf") if r["kind"] == "train"]
assert [set(ruled(r["density"]).values()) for r in spdf] == [{0.25}] * 2 + [{1.0}] * 3, spdf
grown = spdf[2]["mask_update"]["grown"]
assert len(grown) == 8 and all(n > 0 for n in grown.values()), grown
PY
check "gmp prunes to 0.25; spdf is dense after step 3" [ $? -eq 0 ] || cat "$tmp/check"
grep -q "densify: after step 3 every sparse weight is dense" "$tmp/job_spdf.log"
check "spdf says when it densifies" [ $? -eq 0 ]

checks_done sweep_smoke_test
