#!/usr/bin/env bash
# tools/bench/compare.py: a Coppice bench report beside a PyTorch one, row by
# row, and each block-sparse attention row beside PyTorch's dense attention of
# the same causality, by time.
set -u
script="${1:?usage: compare_test.sh path/to/compare.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/compare_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
row() {  # row FORMAT MS [SPARSITY] [BACKEND]: one bf16 forward + backward attention row at the GPT's shape
  local extra=""
  [ -n "${3:-}" ] && extra="$extra, \"sparsity\": $3"
  [ -n "${4:-}" ] && extra="$extra, \"backend\": \"$4\""
  echo "{\"suite\": \"attention\", \"op\": \"attention_fwd_bwd\", \"device\": \"cuda:0\", \"dtype\": \"bf16\",
         \"shape\": [32, 16, 512, 64], \"format\": \"$1\", \"status\": \"ok\", \"median_ms\": $2,
         \"gflops\": $(python3 -c "print(1.0 / $2)")$extra}"
}
cat >"$tmp/coppice.json" <<JSON
{"build": "opt", "results": [$(row causal 0.40), $(row block_sparse 0.25 0.71875), $(row full 0.60),
 $(row window 0.16 0.75)]}
JSON
cat >"$tmp/torch.json" <<JSON
{"torch_version": "2.11", "results": [$(row causal 0.50 "" default), $(row full 0.80 "" default),
 $(row window 0.70 0.75 efficient)]}
JSON

python3 "$script" "$tmp/coppice.json" "$tmp/torch.json" >"$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "rows matched on format and sparsity: window 75 % beside PyTorch's masked window (4.38x)" \
  grep -qE '^attention +cuda:0 bf16 +32x16x512x64 window 75% +0\.1600 +0\.7000 .* 4\.38 ' "$tmp/out"
check "a row PyTorch lacks is marked missing" grep -qE 'block_sparse 71\.875%.*torch: missing' "$tmp/out"
check "the block-sparse table's causal row: PyTorch's dense causal over Coppice's block-sparse (2.00x)" \
  grep -qE '^bf16 +32x16x512x64 +attention_fwd_bwd +block_sparse 71\.875% +0\.2500 causal \(default\) +0\.5000 +2\.00$' \
  "$tmp/out"
check "its window row: PyTorch's dense full over Coppice's window (5.00x)" \
  grep -qE '^bf16 +32x16x512x64 +attention_fwd_bwd +window 75% +0\.1600 full \(default\) +0\.8000 +5\.00$' "$tmp/out"
check "dense rows are not in that table" bash -c "! grep -qE '^bf16 .* (causal|full) +[0-9.]+ (causal|full) ' '$tmp/out'"

# Without a dense peer the table is left out.
cat >"$tmp/torch_masked_only.json" <<JSON
{"torch_version": "2.11", "results": [$(row window 0.70 0.75 efficient)]}
JSON
python3 "$script" "$tmp/coppice.json" "$tmp/torch_masked_only.json" >"$tmp/out2" 2>&1
check "no dense peer, no block-sparse table" bash -c "! grep -q 'block-sparse attention against' '$tmp/out2'"

checks_done
