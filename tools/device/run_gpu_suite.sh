#!/usr/bin/env bash
# Runs on the lent GPU machine from the repo root, with .devbin carried
# (tools/device/build_devbin.sh makes it): every test binary (GPU tests must
# not skip there), the demo on the GPU, and the benchmarks side by side with
# PyTorch. A few summary files go to $OUT, everything else into
# $OUT/gpu_logs.tgz (the device tool brings back at most 8 files).
# GPU_SUITE_BENCH=0 stops before the benchmarks.
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/gpu_suite
# DEVBIN_PACK: the part of build_devbin.sh's pack carried (default
# .devbin_pack, the part with the demo, trainer and bench).
PACK=${DEVBIN_PACK:-.devbin_pack}
if [[ -f $PACK/devbin.tar.zst ]]; then
  rm -rf .devbin  # another part's binaries, from an earlier call on a warm machine
  LD_LIBRARY_PATH=$PACK/zstd $PACK/zstd/zstd -q -d --long=31 -c "$PACK/devbin.tar.zst" | tar xf -
fi
rm -rf "$W" && mkdir -p "$W" "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$W/gpu.txt"

# GPU_TEST_TIMEOUT (default 300 s) a binary: a test that hangs fails
# (rc=124) instead of taking the call's whole time limit.
for t in .devbin/tests/*; do
  name=$(basename "$t")
  timeout "${GPU_TEST_TIMEOUT:-300}" "$t" --gtest_brief=1 --gtest_output="xml:$W/$name.xml" > "$W/$name.log" 2>&1
  rc=$?
  c=$(grep -c '<testcase' "$W/$name.xml" 2>/dev/null || true)
  f=$(grep -c '<failure' "$W/$name.xml" 2>/dev/null || true)
  s=$(grep -c 'result="skipped"' "$W/$name.xml" 2>/dev/null || true)
  c=${c:-0}; f=${f:-0}; s=${s:-0}
  if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
  echo "$name rc=$rc cases=$c failed=$f skipped=$s"
done > "$W/tests.txt"
{
  awk '{for(i=2;i<=NF;i++){split($i,kv,"="); v[kv[1]]+=kv[2]}}
       END {printf "GPU suite (%s): %d passed, %d failed, %d skipped\n", pack, v["cases"]-v["failed"]-v["skipped"], v["failed"], v["skipped"]}' pack="$PACK" "$W/tests.txt"
  grep -v ' failed=0 skipped=0' "$W/tests.txt" | sed 's/^/  not clean: /'
  echo "skip reasons:"; grep -ho 'skipped message="[^"]*"' "$W"/*.xml | sort | uniq -c | head -20
  for x in "$W"/*.log; do grep -l 'FAILED\|Failure' "$x" >/dev/null && { echo "== $(basename "$x")"; grep -A8 'Failure\|FAILED' "$x" | head -40; }; done
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt" | head -60

if [[ ! -x .devbin/trainer ]]; then  # a second part, or a DEVBIN_TESTS_ONLY pack (build_devbin.sh)
  echo "this part has no demo, trainer or bench: the first part (.devbin_pack) or run_gpt.sh tests runs them"
  exit 0
fi
echo "== demo on the GPU"
.devbin/mlp_demo --device cuda > "$OUT/demo.txt" 2>&1; tail -8 "$OUT/demo.txt"
echo "== trainer on the GPU (synthetic RigL job), and its checkpoint read by PyTorch"
.devbin/trainer --config .devbin/gpu_smoke.yaml --set checkpoint.dir="$W/ckpt" --run-dir "$W/run" \
  > "$OUT/trainer.txt" 2>&1
echo "trainer exit $?" >> "$OUT/trainer.txt"
ckpt=$(ls "$W"/ckpt/*.safetensors 2>/dev/null | tail -1)
[[ -n "$ckpt" ]] && python3 .devbin/read_checkpoint_torch.py "$ckpt" >> "$OUT/trainer.txt" 2>&1
tail -25 "$OUT/trainer.txt"
echo "== trainer on the GPU: block RigL (BSR 32x32, bf16, block scores probed)"
.devbin/trainer --config .devbin/gpu_smoke_bsr.yaml --run-dir "$W/run_bsr" > "$W/trainer_bsr.txt" 2>&1
echo "trainer exit $?" >> "$W/trainer_bsr.txt"
tail -12 "$W/trainer_bsr.txt" | tee "$OUT/trainer_bsr.txt"
if [[ ${GPU_SUITE_BENCH:-1} == 0 ]]; then  # the tests, demo and trainer only
  tar czf "$OUT/gpu_logs.tgz" -C "$W" .
  exit 0
fi
echo "== benchmarks"
.devbin/bench all --device all --json "$OUT/bench_coppice.json" > "$W/bench_coppice.log" 2>&1
python3 .devbin/torch_reference.py --json "$OUT/bench_torch.json" > "$W/bench_torch.log" 2>&1
python3 .devbin/compare.py "$OUT/bench_coppice.json" "$OUT/bench_torch.json" > "$OUT/compare.txt" 2>&1
cat "$OUT/compare.txt"
tar czf "$OUT/gpu_logs.tgz" -C "$W" .
