#!/usr/bin/env bash
# tools/sweep frontier: the points of frontier.jsonl (time from the train
# records, FLOPs from the summary's Linear count and the job's rows per step,
# null where the sweep cannot count them) and the picture. The runs come from
# the stub trainer (sweep_fake_trainer.sh), whose numbers are known.
set -u
sweep="${1:?usage: sweep_frontier_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
fake="${2:?usage: sweep_frontier_test.sh path/to/tools/sweep path/to/sweep_fake_trainer.sh}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_frontier_test"
rm -rf "$tmp" && mkdir -p "$tmp"
SWEEP_TRAINER="$(realpath "$fake")"
export SWEEP_TRAINER
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
has() { grep -qF -- "$1" "$tmp/log"; }
out="$tmp/out"

"$sweep" frontier "$out" >"$tmp/log" 2>&1
check "a directory without runs fails (exit 1)" [ $? -eq 1 ]
check "and says so" has "no runs/ directory"

printf 'model: {name: gpt}\ndata: {seq_len: 16, batch_size: 2}\n' >"$tmp/base.yaml"
cat >"$tmp/sweep.yaml" <<YAML
base: $tmp/base.yaml
reference: dense
runs:
  - name: dense
  - name: sparse
    set: {sparsity.density: 0.1}
  - name: conv
    set: {model: {name: lenet5}}
  - name: pruned
  - name: wide
    set: {data.batch_size: 4, model.options.dim: 256}
YAML
FAKE_TRAINER_PRUNE=pruned "$sweep" run "$tmp/sweep.yaml" --out "$out" >"$tmp/log" 2>&1
check "the sweep runs" [ $? -eq 0 ]

"$sweep" frontier "$out" >"$tmp/log" 2>&1
rc=$?
check "frontier exits 0 (or 1 without gnuplot)" [ $rc -eq 0 -o \( $rc -eq 1 -a -z "$(command -v gnuplot)" \) ]
check "frontier.jsonl: two evaluations of five runs" [ "$(wc -l <"$out/frontier.jsonl")" = 10 ]
# One line per (run, evaluation), sorted by run name: name, step, time_s, flops, val_loss.
# FLOPs = 3 x linear_flops_sparse x seq_len x batch_size x step: dense 3*1000*16*2 = 96000 a step.
cat >"$tmp/want" <<'JSONL'
{"name": "conv", "step": 2, "time_s": 1.0, "flops": null, "val_loss": 2.8}
{"name": "conv", "step": 4, "time_s": 2.0, "flops": null, "val_loss": 2.6}
{"name": "dense", "step": 2, "time_s": 1.0, "flops": 192000, "val_loss": 2.8}
{"name": "dense", "step": 4, "time_s": 2.0, "flops": 384000, "val_loss": 2.6}
{"name": "pruned", "step": 2, "time_s": 1.0, "flops": null, "val_loss": 2.8}
{"name": "pruned", "step": 4, "time_s": 2.0, "flops": null, "val_loss": 2.6}
{"name": "sparse", "step": 2, "time_s": 0.5, "flops": 19200, "val_loss": 2.85}
{"name": "sparse", "step": 4, "time_s": 1.0, "flops": 38400, "val_loss": 2.65}
{"name": "wide", "step": 2, "time_s": 1.0, "flops": 384000, "val_loss": 2.8}
{"name": "wide", "step": 4, "time_s": 2.0, "flops": 768000, "val_loss": 2.6}
JSONL
python3 - "$tmp/want" "$out/frontier.jsonl" <<'PY' >"$tmp/diff" 2>&1
import json, math, sys
want = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
def same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12))
for w, g in zip(want, got):
    if list(w) != list(g) or not all(same(w[k], g[k]) for k in w):
        sys.exit(f"want {w}\n got {g}")
PY
check "frontier.jsonl holds the expected points" [ $? -eq 0 ] || cat "$tmp/diff"
check "a model it cannot count is named" has "conv: no FLOPs count (model 'lenet5'"
check "changing densities are named" has "pruned: no FLOPs count (the densities change during the run"
check "both are left out of the FLOPs panel" [ "$(grep -c 'left out of the FLOPs panel' "$tmp/log")" = 2 ]
check "the table has every run" [ "$(grep -cE '^(conv|dense|pruned|sparse|wide) ' "$tmp/log")" = 5 ]

# A finished run kept aside by --rerun is not a point of the frontier.
cp -r "$out/runs/dense" "$out/runs/dense.previous.1"
"$sweep" frontier "$out" --png "$tmp/elsewhere.png" --reference nosuch >"$tmp/log" 2>&1
check "runs moved aside are left out" [ "$(wc -l <"$out/frontier.jsonl")" = 10 ]
check "an unfinished reference is named" has "the reference run 'nosuch' has not finished"

if command -v gnuplot >/dev/null 2>&1; then
  check "the picture is a PNG" [ "$(head -c 4 "$out/frontier.png" | tail -c 3)" = "PNG" ]
  check "--png writes there" [ "$(head -c 4 "$tmp/elsewhere.png" | tail -c 3)" = "PNG" ]
  "$sweep" frontier "$out" --png "$tmp/missing/out.png" >"$tmp/log" 2>&1
  check "an unwritable picture fails (exit 1)" [ $? -eq 1 ]
  check "and names the file" has "cannot write '$tmp/missing/out.png'"
else
  echo "SKIP the picture checks: gnuplot is not installed (tools/setup installs gnuplot-nox)"
fi

checks_done sweep_frontier_test
