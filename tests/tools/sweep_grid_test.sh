#!/usr/bin/env bash
# tools/sweep run --dry-run: how a sweep file expands into runs (names, the
# Cartesian product, the exact trainer commands), and the sweep files it
# refuses before running anything, each naming the file and the key.
set -u
sweep="${1:?usage: sweep_grid_test.sh path/to/tools/sweep}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/sweep_grid_test"
rm -rf "$tmp" && mkdir -p "$tmp"
export SWEEP_TRAINER="/fake/trainer --flag"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
has() { grep -qF -- "$1" "$tmp/log"; }
echo 'name: base_job' >"$tmp/base.yaml"

cat >"$tmp/grid.yaml" <<YAML
base: $tmp/base.yaml
reference: dense
max_steps: 3
set: {optimizer.lr: 0.1}
runs:
  - name: dense
  - name: s
    set:
      mask_update.method: static
      sparsity: {rules: [{regex: 'fc[12]\.weight', format: bsr, block_rows: 32}]}
    grid:
      sparsity.density: [0.5, 0.1]
      sparsity.rules[0].block_rows: [32, 64]
  - name: clash
    grid: {a.x: [1], b.x: [two]}
YAML
"$sweep" run "$tmp/grid.yaml" --out "$tmp/out" --dry-run >"$tmp/log" 2>&1
check "a dry run exits 0" [ $? -eq 0 ]
grep -E '^[^ ].*: (to run|finished)' "$tmp/log" | cut -d: -f1 >"$tmp/names"
printf '%s\n' dense 's__density=0.5__block_rows=32' 's__density=0.5__block_rows=64' \
  's__density=0.1__block_rows=32' 's__density=0.1__block_rows=64' 'clash__a.x=1__b.x=two' >"$tmp/want"
check "the grid expands in order, the last key fastest" diff "$tmp/want" "$tmp/names"
check "the header counts the runs" has "6 runs of $tmp/base.yaml"
check "the command is the trainer's, with the file's set, then the run's" \
  has "/fake/trainer --flag --config $tmp/base.yaml --run-dir $tmp/out/runs/dense --set optimizer.lr=0.1 --set logging.metrics=$tmp/out/runs/dense/metrics.jsonl --set checkpoint.dir=$tmp/out/runs/dense/checkpoints --max-steps 3"
check "grid values follow the run's own set" \
  has "--set mask_update.method=static --set 'sparsity={\"rules\": [{\"regex\": \"fc[12]\\\\.weight\", \"format\": \"bsr\", \"block_rows\": 32}]}' --set sparsity.density=0.1 --set 'sparsity.rules[0].block_rows=64'"
check "a dry run runs nothing and writes nothing" [ ! -e "$tmp/out" ]

"$sweep" run "$tmp/grid.yaml" --out "$tmp/out" --dry-run --max-steps 7 --set optimizer.lr=0.5 --set device=cpu >"$tmp/log" 2>&1
check "--max-steps and --set from the command line come last" \
  has "--run-dir $tmp/out/runs/dense --set optimizer.lr=0.5 --set device=cpu --set logging.metrics"
check "--max-steps replaces the file's" has "--max-steps 7"

refused() {  # refused NAME TEXT [ARGS...]: the sweep file $tmp/bad.yaml is refused with exit 2 and TEXT
  local name="$1" text="$2"; shift 2
  "$sweep" run "$tmp/bad.yaml" --out "$tmp/out" "$@" >"$tmp/log" 2>&1
  local rc=$?
  check "$name: exit 2" [ $rc -eq 2 ]
  check "$name: says '$text'" has "$text"
  check "$name: names the file" has "$tmp/bad.yaml"
}
bad() { printf 'base: %s\n' "$tmp/base.yaml" >"$tmp/bad.yaml"; cat >>"$tmp/bad.yaml"; }

bad <<<$'rnus: []'
refused "an unknown top-level key" "rnus: unknown key; did you mean 'runs'?"
bad <<<$'runs:\n  - name: a\n  - name: b\n  - name: a'
refused "a duplicate run name" "runs[2]: the run name 'a' is also given by runs[0]"
bad <<<$'runs:\n  - name: s__density=0.5\n  - name: s\n    grid: {sparsity.density: [0.5]}'
refused "a generated name that is taken" "runs[1].grid: the run name 's__density=0.5' is also given by runs[0]"
bad <<<$'runs:\n  - name: s\n    grid: {sparsity.density: []}'
refused "an empty grid list" "runs[0].grid.sparsity.density: expected a non-empty list"
bad <<<$'runs:\n  - name: s\n    grid: {}'
refused "an empty grid" "runs[0].grid: expected a map"
bad <<<$'runs:\n  - name: s\n    set: {sparsity.density: 0.1}\n    grid: {sparsity.density: [0.5]}'
refused "a grid key also set" "runs[0].grid.sparsity.density: also in runs[0].set"
bad <<<$'runs:\n  - name: ../escape'
refused "a name that is not a directory name" "runs[0].name: '../escape' is not a safe directory name"
bad <<<$'runs:\n  - name: s\n    grid: {data.path: [/tmp/x]}'
refused "a grid value that makes an unsafe name" "is not a safe directory name"
bad <<<$'runs:\n  - name: a\n    set: {logging.metrics: m.jsonl}'
refused "a key the sweep owns" "runs[0].set.logging.metrics: the sweep sets logging.metrics itself"
bad <<<$'runs:\n  - name: a\n    grdi: {x: [1]}'
refused "an unknown run key" "runs[0].grdi: unknown key; did you mean 'grid'?"
bad <<<$'reference: sparse\nruns:\n  - name: a'
refused "a reference that is no run" "reference: 'sparse' is not one of the runs"
bad <<<$'runs:\n  - name: a\n    set: {optimizer.lr: 0.1, optimizer.lr: 0.2}'
refused "a key given twice" "duplicate key 'optimizer.lr'"
bad <<<$'runs: []'
refused "no runs" "runs: expected a non-empty list"
bad <<<$'max_steps: 0\nruns:\n  - name: a'
refused "max_steps 0" "max_steps: expected a whole number >= 1"
printf 'base: %s\nruns:\n  - name: a\n' "$tmp/missing.yaml" >"$tmp/bad.yaml"
refused "a base job that does not exist" "base: no job file '$tmp/missing.yaml'"
printf 'base: missing.yaml\nruns:\n  - name: a\n' >"$tmp/bad.yaml"
refused "a relative base job is looked for in two places" "(looked for "
bad <<<$'runs:\n  - name: a'
refused "--rerun of no run" "--rerun b: no such run" --rerun b
"$sweep" run "$tmp/bad.yaml" --set novalue --dry-run >"$tmp/log" 2>&1
check "--set without = is refused (exit 2)" [ $? -eq 2 ]
check "--set without = says so" has "--set novalue: expected key.path=value"
"$sweep" run "$tmp/nosuch.yaml" --dry-run >"$tmp/log" 2>&1
check "a missing sweep file is refused (exit 2)" [ $? -eq 2 ]
check "a missing sweep file is named" has "cannot read the sweep file '$tmp/nosuch.yaml'"
check "nothing ran" [ ! -e "$tmp/out" ]

"$sweep" --help >"$tmp/log" 2>&1
check "--help explains the FLOPs column" has "6 x nnz(Linear weights) x tokens"

checks_done sweep_grid_test
