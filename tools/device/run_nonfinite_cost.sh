#!/usr/bin/env bash
# Issue 30's acceptance: the per-step check for inf/NaN costs < 1 % of the
# MLP-4096 and GPT steps on the GPU and of the LeNet-300-100 step on the CPU.
# Runs on the lent single-GPU machine from the repo root: the trainer before
# the check (built from d5d1c29 into .devbin_pack/before.tar.zst as
# .devbin_before/trainer) against today's (.devbin/trainer, from
# build_devbin.sh's pack), alternating, REPS runs each (default 3), on the
# jobs of tools/device/nonfinite_cost/ (the GPT job reads corpus.txt, carried
# in the same pack). $OUT gets steps.md and steps_raw.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
Z=".devbin_pack/zstd"
[[ -x .devbin/trainer ]] || LD_LIBRARY_PATH=$Z $Z/zstd -q -d --long=31 -c .devbin_pack/devbin.tar.zst | tar xf -
[[ -x .devbin_before/trainer ]] || LD_LIBRARY_PATH=$Z $Z/zstd -q -d --long=31 -c .devbin_pack/before.tar.zst | tar xf -
cd tools/device/nonfinite_cost
cp ../../../.devbin_before/corpus.txt . 2>/dev/null
{
  echo "== run_nonfinite_cost.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) CPU cores, $(date -u +%FT%TZ)"
  OUT=$OUT python3 compare_steps.py ../../../.devbin_before/trainer ../../../.devbin/trainer "${REPS:-3}" mlp.yaml gpt.yaml lenet.yaml
} 2>&1 | tee "$OUT/steps.md"
