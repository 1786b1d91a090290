#!/usr/bin/env bash
# Runs on the lent GPU machine after tools/device/run_gpu_suite.sh has
# unpacked .devbin (same call): sparsity propagation on CUDA (issue 35).
#   1. tools/device/gpu_relu_outputs.yaml with its hand-written output rules,
#      and with sparsity.propagate instead: the losses of every step compared
#      (bit for bit), the plan kept;
#      (and the written job twice: whether the CUDA step is deterministic);
#   2. bench train --propagate off and on: the MLP 4096 (dense weights, and
#      CSR 90 %) in bf16, PyTorch not involved (both rows are Coppice's, one
#      process each, same machine; the job models' validation needs the
#      datasets, which that machine lacks).
# $OUT gets propagation.txt, plan.jsonl, prop_off.json, prop_on.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/propagation
rm -rf "$W" && mkdir -p "$W" "$OUT"
S="$OUT/propagation.txt"
job=tools/device/gpu_relu_outputs.yaml
for run in written written_again; do
  .devbin/trainer --config "$job" --run-dir "$W/$run" > "$W/$run.log" 2>&1
  echo "$run: exit $?" >> "$S"
done
.devbin/trainer --config "$job" --set 'sparsity.outputs=[]' --set sparsity.propagate=true --run-dir "$W/inferred" \
  > "$W/inferred.log" 2>&1
echo "inferred: exit $?" >> "$S"
cp "$W/inferred/plan.jsonl" "$OUT/" 2>/dev/null
python3 - "$W" >> "$S" 2>&1 <<'PY'
import json, sys
w = sys.argv[1]
def losses(name):
    return [r["loss"] for r in map(json.loads, open(f"{w}/{name}/metrics.jsonl")) if r.get("kind") == "train"]
a, again, b = losses("written"), losses("written_again"), losses("inferred")
for name, other in (("written again", again), ("inferred", b)):
    differ = [i + 1 for i, (x, y) in enumerate(zip(a, other)) if x != y]
    worst = max((abs(x - y) for x, y in zip(a, other)), default=0)
    print(f"{name} vs written: {len(other)} steps, {len(other) - len(differ)} identical; "
          f"differing steps {differ[:10]}, largest difference {worst:.3g}")
PY
grep -h "dense fallbacks" "$W/written.log" "$W/inferred.log" >> "$S"
for p in off on; do
  timeout 200 .devbin/bench train --device cuda --models mlp --formats dense,csr --sparsity 0.9 \
    --modes bf16 --steps 5 --warmup 2 --propagate $p --config-dir configs --json "$OUT/prop_$p.json" \
    > "$W/bench_$p.log" 2>&1
  echo "bench --propagate $p: exit $?" >> "$S"
done
python3 - "$OUT" >> "$S" 2>&1 <<'PY'
import json, sys
rows = {}
for p in ("off", "on"):
    for r in json.load(open(f"{sys.argv[1]}/prop_{p}.json"))["results"]:
        rows.setdefault((r["op"].replace("+propagate", ""), r["format"], r["dtype"]), {})[p] = r
for (op, fmt, dt), v in sorted(rows.items()):
    off, on = v.get("off", {}), v.get("on", {})
    print(f"{op:5} {fmt:5} {dt:4} off {off.get('median_ms')} ms, on {on.get('median_ms')} ms, "
          f"rules {on.get('inferred_rules')}, status {off.get('status')}/{on.get('status')}")
PY
cat "$S"
