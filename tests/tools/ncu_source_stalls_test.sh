#!/usr/bin/env bash
# tools/device/ncu_source_stalls.py: Nsight Compute's source page (SASS with
# warp-stall samples) summed over a kernel's launches, by opcode and by
# instruction, with each one's largest stall reasons; both spellings of the
# reason columns; a clear refusal of a page without samples.
set -u
script="${1:?usage: ncu_source_stalls_test.sh path/to/ncu_source_stalls.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/ncu_source_stalls_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done

# Two launches of one kernel: a title row, then a table, each; the raw
# metric names of the reasons; thousands with commas.
header='"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_barrier","smsp__pcsamp_warps_issue_stalled_barrier_not_issued","smsp__pcsamp_warps_issue_stalled_wait"'
{
  echo '==PROF== Connected to process 7'
  echo '"Kernel Name","forward_kernel<__nv_bfloat16, 128>"'
  echo "$header"
  echo '"0x7f00","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3","1,000","900","1,000","0","0","0"'
  echo '"0x7f10","BAR.SYNC.DEFER_BLOCKING 0x0","300","300","0","250","250","50"'
  echo '"0x7f20","HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ","100","20","0","0","0","100"'
  echo '"Kernel Name","forward_kernel<__nv_bfloat16, 128>"'
  echo "$header"
  echo '"0x7f00","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3","500","450","500","0","0","0"'
  echo '"0x7f10","BAR.SYNC.DEFER_BLOCKING 0x0","100","100","0","100","100","0"'
} > "$tmp/fwd.csv"
# The short reason names of other versions, one launch.
{
  echo '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_math"'
  echo '"0x10","WARPGROUP.DEPBAR.LE gsb0, 0x0","80","0","80"'
  echo '"0x20","LDG.E R2, [R4.64]","20","20","0"'
} > "$tmp/dkdv.csv"

python3 "$script" --top 5 forward="$tmp/fwd.csv" dkdv="$tmp/dkdv.csv" > "$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "the launches summed: 2000 samples over 2 launches" grep -qF '### forward: 2000 warp-stall samples over 2 launches' "$tmp/out"
check "the mbarrier wait's opcode first, its predicate dropped, its reason named short" \
  grep -qF '| SYNCS.PHASECHK.TRANS64.TRYWAIT | 75.0 % | long_scoreboard 100 % |' "$tmp/out"
check "BAR.SYNC: barrier 88 %, wait 12 % (not-issued halves left out)" \
  grep -qF '| BAR.SYNC.DEFER_BLOCKING | 20.0 % | barrier 88 %, wait 12 % |' "$tmp/out"
check "the instruction rows: address, text, share" \
  grep -qF '| 0x7f20 | `HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ` | 5.0 % | wait 100 % |' "$tmp/out"
check "the short spelling of the reasons (stall_math)" grep -qF '| WARPGROUP.DEPBAR.LE | 80.0 % | math 100 % |' "$tmp/out"
check "one launch reads 'launch'" grep -qF '### dkdv: 100 warp-stall samples over 1 launch' "$tmp/out"

echo '"Address","Source","Instructions Executed"' > "$tmp/nosamples.csv"
python3 "$script" k="$tmp/nosamples.csv" > "$tmp/out2" 2>&1
check "a page without samples: exit 1" [ $? -eq 1 ]
check "saying which column is missing and how to collect it" grep -qF "without 'Warp Stall Sampling (All Samples)'" "$tmp/out2"
python3 "$script" k="$tmp/absent.csv" > "$tmp/out3" 2>&1
check "a missing file: exit 1 naming it" bash -c "[ $? -eq 1 ] && grep -qF 'absent.csv' '$tmp/out3'"
python3 "$script" "$tmp/fwd.csv" > /dev/null 2>&1
check "an argument without NAME=: usage, exit 2" [ $? -eq 2 ]
checks_done ncu_source_stalls_test
