#!/usr/bin/env bash
# Runs on the lent single-GPU machine from the repo root, with .devbin_pack
# (tools/device/build_devbin.sh) and .devbin_exp (the mma_sp_rate and
# nm24_wgmma_check experiments, built as their headers say) carried:
#
#   device run, carry [".devbin_pack", ".devbin_exp"], command
#     tools/device/run_nm24_bench.sh
#
# The 2:4 sparse tensor-core path, in one call:
# - mma_sp_rate: which metadata layout mma.sp reads, and the dense mma.sync,
#   sparse mma.sp and cuBLAS rates (the bound on the kernels);
# - nm24_wgmma_check: the sparse wgmma and mma.sp kernels against the host
#   and cuBLAS, and their times beside cuBLAS's;
# - the parity tests of the path (nm24_mma_test, spmm_test, nm_metadata_test);
# - bench spmm (its 2:4 rows: a 2:4 linear layer's products and gelu forms beside
#   cuBLAS dense) with COPPICE_ROUTES=nm24=sparse (the kernels), dense (the
#   dense route) and auto (the measured choice), and torch_reference.py spmm
#   (to_sparse_semi_structured) -> one table per mode in summary.txt;
# - bench train of the MLP-4096, dense and 2:4 (transposable masks; the 2:4
#   step also with nm24 pinned sparse and dense), in PROFILE_MODES (default
#   bf16), beside torch_train.py's dense step;
# - with NM24_NCU=1 (the default), Nsight Compute's SpeedOfLight, memory,
#   compute and warp-state sections of the 2:4 product kernels.
# $OUT gets summary.txt and logs.tgz; 4-7 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}
MODES=${PROFILE_MODES:-bf16}
W=/tmp/nm24_bench
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
if [[ -f .devbin_pack/devbin.tar.zst ]]; then
  LD_LIBRARY_PATH=.devbin_pack/zstd .devbin_pack/zstd/zstd -q -d --long=31 -c .devbin_pack/devbin.tar.zst | tar xf -
fi
say "== run_nm24_bench.sh on $(hostname), $(date -u +%FT%TZ), modes $MODES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
B=.devbin/bench

if [[ -x .devbin_exp/mma_sp_rate ]]; then
  timeout 60 .devbin_exp/mma_sp_rate 2>&1 | tee -a "$SUMMARY"
fi
if [[ -x .devbin_exp/nm24_wgmma_check ]]; then
  timeout 60 .devbin_exp/nm24_wgmma_check 2>&1 | grep -v '"sample"' | tee -a "$SUMMARY"
fi
for t in sparse_cuda_nm24_mma_test sparse_cuda_spmm_test sparse_nm_metadata_test; do
  if timeout 300 .devbin/tests/$t > "$W/$t.log" 2>&1; then say "[$t] $(grep -E '^\[  PASSED' "$W/$t.log")"
  else say "[$t] FAILED: $(grep -E '^\[  FAILED|Failure|Expected|Which is|element' "$W/$t.log" | head -12)"; fi
done

timeout 200 python3 .devbin/torch_reference.py spmm --device cuda --json "$W/spmm_torch.json" > "$W/torch_spmm.log" 2>&1 ||
  say "torch spmm: exit $?"
# The kernels themselves (sparse), the dense route (dense), and the measured choice (auto, the default).
for mode in sparse dense auto; do
  COPPICE_ROUTES=nm24=$mode timeout 240 $B spmm --device cuda --json "$W/spmm_$mode.json" > "$W/bench_spmm_$mode.log" 2>&1 ||
    say "bench spmm ($mode): exit $?"
  say "COPPICE_ROUTES=nm24=$mode:"
  python3 .devbin/nm24_compare.py --coppice "$W/spmm_$mode.json" --torch "$W/spmm_torch.json" \
    --out "$W/nm24_table_$mode.md" > "$W/nm24_compare_$mode.log" 2>&1 || say "nm24_compare: $(tail -3 "$W/nm24_compare_$mode.log")"
  cat "$W/nm24_table_$mode.md" 2>/dev/null | tee -a "$SUMMARY"
done
cp "$W/spmm_sparse.json" "$OUT/spmm_coppice.json" 2>/dev/null

common=(train --device cuda --models mlp --config-dir configs --modes "$MODES")
timeout 240 $B "${common[@]}" --formats dense,nm --steps 10 --warmup 3 --json "$OUT/train_coppice.json" \
  > "$W/bench_train.log" 2>&1 || say "bench train: exit $?"
for mode in sparse dense; do
  COPPICE_ROUTES=nm24=$mode timeout 240 $B "${common[@]}" --formats nm --steps 10 --warmup 3 \
    --json "$W/train_nm_$mode.json" > "$W/bench_train_nm_$mode.log" 2>&1 || say "bench train ($mode): exit $?"
  sed "s/^train/train (nm24=$mode)/" "$W/bench_train_nm_$mode.log" > "$W/bench_train_nm_$mode.txt"
done
timeout 150 python3 .devbin/torch_train.py --device cuda --models mlp --formats dense --modes "$MODES" --steps 10 \
  --warmup 3 --json "$W/train_torch.json" > "$W/torch_train.log" 2>&1 || say "torch_train: exit $?"
grep -h '^train\|^torch train' "$W/bench_train.log" "$W"/bench_train_nm_*.txt "$W/torch_train.log" | tee -a "$SUMMARY"
COPPICE_PROFILE=1 timeout 120 $B "${common[@]}" --formats nm --steps 5 --warmup 2 > "$W/profile_nm.log" 2>&1 ||
  say "profile: exit $?"
tail -40 "$W/profile_nm.log" > "$OUT/profile_nm.txt"

if [[ ${NM24_NCU:-1} == 1 ]] && command -v ncu > /dev/null; then
  timeout 200 ncu --kernel-name regex:'nm24_product_kernel|nm24_wgmma_kernel' --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats \
    $B spmm --device cuda --dtype bf16 --reps 1 --warmup 0 > "$OUT/ncu_nm24.txt" 2>&1 || say "ncu: exit $?"
fi
say "== done $(date -u +%FT%TZ)"
tar czf "$OUT/logs.tgz" -C "$W" .
