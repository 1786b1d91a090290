#!/usr/bin/env bash
# Runs on the lent single-GPU machine (nvidia-h100-x1) from the repo root,
# with .devbin_pack carried (tools/device/build_devbin.sh makes it):
#
#   device run, kind nvidia-h100-x1, carry [".devbin_pack"], command
#     tools/device/run_bsr_bench.sh
#
# Block-sparse products and the BSR training step, in one call:
# - the BSR kernels' parity tests (bsr_mma_test, bsr_tiles_test) and the fused SGD steps;
# - `bench bsr` (a BSR linear layer's products and gelu forms, 16/32/64 blocks,
#   90/95/98 %, bf16/f16/TF32, beside cuBLAS dense) and torch_reference.py
#   bsr (PyTorch's Triton BSR F.linear and dense F.linear) -> bsr_table.md;
# - `bench train` of the MLP, dense and BSR, in PROFILE_MODES (default bf16),
#   eager and from CUDA graphs, beside torch_train.py's dense steps;
# - `bench rigl`: a block-RigL update step of the MLP beside its ordinary step,
#   90 % in f32/tf32/bf16 and 98 % in bf16;
# - COPPICE_PROFILE=shapes for the BSR 90 % step (per op and shape);
# - with BSR_NCU=1, Nsight Compute: every kernel of one BSR 90 % step with its
#   duration (ncu_step.csv), and the SpeedOfLight, memory and occupancy
#   sections of the BSR product kernels (ncu_products.txt).
# $OUT gets summary.txt and the logs; 3-6 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}
MODES=${PROFILE_MODES:-bf16}
W=/tmp/bsr_bench
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
if [[ -f .devbin_pack/devbin.tar.zst ]]; then
  LD_LIBRARY_PATH=.devbin_pack/zstd .devbin_pack/zstd/zstd -q -d --long=31 -c .devbin_pack/devbin.tar.zst | tar xf -
fi
FM=/usr/share/datasets/fashion-mnist
if [[ ! -d $FM ]] && mkdir -p "$FM" 2>/dev/null; then
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    : > "$FM/$f"
  done
fi
say "== run_bsr_bench.sh on $(hostname), $(date -u +%FT%TZ), modes $MODES"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
B=.devbin/bench
common=(train --device cuda --models mlp --config-dir configs --modes "$MODES")

for t in sparse_cuda_bsr_mma_test sparse_cuda_bsr_tiles_test optim_cuda_sgd_step_test; do
  if timeout 300 .devbin/tests/$t > "$W/$t.log" 2>&1; then say "[$t] $(grep -E '^\[  PASSED' "$W/$t.log")"
  else say "[$t] FAILED: $(grep -E '^\[  FAILED|Failure' "$W/$t.log" | head -5)"; fi
done

timeout 240 $B bsr --json "$OUT/bsr_coppice.json" > "$W/bench_bsr.log" 2>&1 || say "bench bsr: exit $?"
timeout 200 python3 .devbin/torch_reference.py bsr --device cuda --json "$W/bsr_torch.json" > "$W/torch_bsr.log" 2>&1 ||
  say "torch bsr: exit $?"
python3 .devbin/bsr_compare.py --coppice "$OUT/bsr_coppice.json" --torch "$W/bsr_torch.json" --out "$OUT/bsr_table.md" \
  > "$W/bsr_compare.log" 2>&1 || say "bsr_compare: $(tail -3 "$W/bsr_compare.log")"
cat "$OUT/bsr_table.md" 2>/dev/null | tee -a "$SUMMARY"

timeout 200 $B "${common[@]}" --formats dense,bsr --steps 10 --warmup 3 --json "$W/train_coppice.json" \
  > "$W/bench_train.log" 2>&1 || say "bench train: exit $?"
timeout 200 $B "${common[@]}" --formats bsr --steps 10 --warmup 3 --cuda-graph --json "$W/train_coppice_graph.json" \
  > "$W/bench_train_graph.log" 2>&1 || say "bench train --cuda-graph: exit $?"
timeout 150 python3 .devbin/torch_train.py --device cuda --models mlp --formats dense --modes "$MODES" --steps 10 \
  --warmup 3 --json "$W/train_torch.json" > "$W/torch_train.log" 2>&1 || say "torch_train: exit $?"
grep -h '^train\|^torch train' "$W/bench_train.log" "$W/bench_train_graph.log" "$W/torch_train.log" | tee -a "$SUMMARY"

timeout 150 $B rigl --device cuda --json "$OUT/rigl.json" > "$W/bench_rigl.log" 2>&1 || say "bench rigl: exit $?"
timeout 90 $B rigl --device cuda --modes bf16 --sparsity 0.98 --json "$W/rigl98.json" > "$W/bench_rigl98.log" 2>&1 ||
  say "bench rigl 98 %: exit $?"
grep -h '^rigl' "$W/bench_rigl.log" "$W/bench_rigl98.log" | tee -a "$SUMMARY"

# Per op: the 90 % step only (the first BSR variant), 10 steps.
COPPICE_PROFILE=shapes timeout 120 $B "${common[@]}" --formats bsr --steps 10 --warmup 2 \
  > "$W/profile_shapes.log" 2>&1 || say "profile: exit $?"

if [[ ${BSR_NCU:-0} == 1 ]] && command -v ncu > /dev/null; then
  # One warm-up step and one profiled step of BSR 90 %: every kernel's duration.
  timeout 240 ncu --metrics gpu__time_duration.sum --csv --launch-count 400 \
    $B "${common[@]}" --formats bsr --steps 1 --warmup 1 > "$W/ncu_step.csv" 2> "$W/ncu_step.err" ||
    say "ncu step: exit $?"
  timeout 200 ncu --kernel-name regex:'mma_product|mma_sddmm|staged_sddmm|product_kernel|sddmm_kernel' --launch-skip 12 \
    --launch-count 8 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis \
    $B "${common[@]}" --formats bsr --steps 1 --warmup 1 > "$W/ncu_products.txt" 2>&1 || say "ncu products: exit $?"
fi
if [[ ${BSR_NCU:-0} == 1 ]] && command -v ncu > /dev/null; then
  # The mma.sync kernels in bench bsr (bf16): forward, dx and SDDMM of 32x32 at 90 %, with stall reasons.
  timeout 200 ncu --kernel-name regex:'mma_sync' --launch-skip 0 --launch-count 3 --set full \
    $B bsr --dtype bf16 --reps 1 --warmup 0 > "$W/ncu_mma.txt" 2>&1 || say "ncu mma: exit $?"
fi
say "== done"
tar czf "$OUT/logs.tgz" -C "$W" .
