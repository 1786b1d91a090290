#!/usr/bin/env bash
# tools/device/ab_table.py: two builds' bench attention reports, round by round,
# the ratio of their medians, and each block-sparse row over PyTorch's dense
# attention of the same causality for both builds; no step tables without steps.
set -u
script="${1:?usage: ab_table_test.sh path/to/ab_table.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/ab_table_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
row() {  # row FORMAT OP MS: one bf16 attention row at head size 128
  echo "{\"suite\": \"attention\", \"op\": \"$2\", \"dtype\": \"bf16\", \"shape\": [16, 16, 1024, 128],
         \"format\": \"$1\", \"status\": \"ok\", \"median_ms\": $3}"
}
report() {  # report FILE WINDOW_MS FULL_MS BLOCK_SPARSE_MS
  echo "{\"results\": [$(row window attention_fwd_bwd "$2"), $(row full attention_fwd_bwd "$3"),
    $(row block_sparse attention_fwd_bwd "$4")]}" > "$tmp/$1"
}
report ab_att_base_1.json 0.50 1.20 0.46
report ab_att_this_1.json 0.40 1.20 0.50
report ab_att_base_2.json 0.52 1.22 0.46
report ab_att_this_2.json 0.44 1.24 0.50
echo "{\"results\": [$(row full attention_fwd_bwd 1.10), $(row causal attention_fwd_bwd 0.80),
  {\"format\": \"window\", \"status\": \"failed\"}]}" > "$tmp/ab_att_torch.json"

python3 "$script" "$tmp" > "$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "the window row: both rounds, base / this of the medians (1.214x), PyTorch's full over each (2.16x, 2.62x)" \
  grep -qF '| 16, 16, 1024, 128 | window | attention_fwd_bwd | 0.5000, 0.5200 | 0.4000, 0.4400 | 1.214x | 1.1000 | 2.16x | 2.62x |' "$tmp/out"
check "block_sparse beside PyTorch's causal (1.74x, 1.60x)" \
  grep -qF '| block_sparse | attention_fwd_bwd | 0.4600, 0.4600 | 0.5000, 0.5000 | 0.920x | 0.8000 | 1.74x | 1.60x |' "$tmp/out"
check "a dense row has no anchor" grep -qF '| full | attention_fwd_bwd | 1.2000, 1.2200 | 1.2000, 1.2400 | 0.992x | - | - | - |' "$tmp/out"
check "no step or product tables without their files" bash -c "! grep -q 'base loss\|weight \[out' '$tmp/out'"

# A build whose report is missing leaves its column empty, not a crash.
rm "$tmp/ab_att_this_2.json" "$tmp/ab_att_this_1.json"
python3 "$script" "$tmp" > "$tmp/out2" 2>&1
check "exits 0 with one build's reports" [ $? -eq 0 ]
check "its columns read -" grep -qF '| window | attention_fwd_bwd | 0.5000, 0.5200 | - | - | 1.1000 | 2.16x | - |' "$tmp/out2"
checks_done ab_table_test
