#!/usr/bin/env bash
# Runs on the lent 2-GPU machine (nvidia-h200-x2) from the repo root, with
# .devbin_pack carried (tools/device/build_devbin.sh makes it):
#
#   device run, kind nvidia-h200-x2, carry [".devbin_pack"], command
#     tools/device/run_multi_gpu.sh
#
#   1. nvidia-smi and the NCCL communicator test binary (when packed);
#   2. bench dp on 1 GPU and on 2 GPUs (tools/launch): dense, compact-90 %,
#      densified-90 %, at 1024 and 4096 examples per GPU (DP_BATCHES);
#      tools/bench/torch_ddp.py (PyTorch, 1 GPU and DDP on 2) in the same
#      call; $OUT/dp_table.md puts them side by side;
#   3. the trainer data-parallel over NCCL on 2 GPUs (tools/device/dp_smoke.yaml)
#      and the same job on 1 GPU with twice the per-rank batch: the max
#      relative difference of their per-step losses, and the same for two
#      runs on 1 GPU (the run-to-run spread, as a yardstick);
#   4. a fault test: two trainer ranks started by hand (no tools/launch),
#      distributed.timeout_s=20, rank 1 SIGKILLed while training: does rank 0
#      exit non-zero with an error line in time, and is its last checkpoint there.
#
# MULTI_GPU_PARTS picks the parts to run (default "1 2 3 4"). With .devq
# carried instead of .devbin_pack (pack_gpt.sh; run_dp_timeline.sh's
# pack), parts 3 and 4 run on its trainer: the script copies what they read
# from the tree.
#
# Every step's outcome goes into $OUT/summary.txt; a failing step does not
# stop the others. Each step has a time limit, and the whole run a deadline
# (MULTI_GPU_DEADLINE_S, default 540 s) after which the remaining steps are
# reported as skipped. $OUT gets summary.txt, dp_table.md and
# multi_gpu_logs.tgz (every log and the dp JSON reports).
set -uo pipefail
export NCCL_NVLS_ENABLE=0  # the lent machines need NVLink SHARP off
OUT=${OUT:-/tmp/out}
W=/tmp/multi_gpu
DEADLINE_S=${MULTI_GPU_DEADLINE_S:-540}
T0=$(date +%s)
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# The time limit for a step: its own, cut to what is left before the deadline (0: skip it).
limit() {
  local want=$1 left=$(( DEADLINE_S - $(date +%s) + T0 ))
  if (( left < 15 )); then echo 0; elif (( want < left )); then echo "$want"; else echo "$left"; fi
}
# run NAME SECONDS CMD...: runs CMD with a limit, output to $W/NAME.log; records the outcome.
run() {
  local name=$1 want=$2; shift 2
  local t; t=$(limit "$want")
  if [[ $t == 0 ]]; then say "[$name] SKIPPED: past the ${DEADLINE_S}s deadline"; return 99; fi
  local s=$(date +%s)
  timeout -k 10 "$t" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  local d=$(( $(date +%s) - s ))
  if [[ $rc == 0 ]]; then say "[$name] ok (${d}s)"
  elif [[ $rc == 124 || $rc == 137 ]]; then say "[$name] FAILED: timed out after ${t}s"
  else say "[$name] FAILED: exit $rc after ${d}s; last lines:"; tail -5 "$W/$name.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
  return $rc
}

if [[ -f .devbin_pack/devbin.tar.zst ]]; then
  LD_LIBRARY_PATH=.devbin_pack/zstd .devbin_pack/zstd/zstd -q -d --long=31 -c .devbin_pack/devbin.tar.zst | tar xf -
fi
if [[ ! -x .devbin/trainer ]] && [[ -f .devq/bins.tar.zst ]]; then
  mkdir -p .devbin && LD_LIBRARY_PATH=.devq/zstd .devq/zstd/zstd -q -d --long=31 -c .devq/bins.tar.zst |
    tar xf - -C .devbin --strip-components=1
fi
[[ -e .devbin/launch ]] || cp tools/launch .devbin/launch
[[ -e .devbin/dp_smoke.yaml ]] || cp tools/device/dp_smoke.yaml .devbin/
[[ -e .devbin/torch_ddp.py ]] || cp tools/bench/torch_ddp.py tools/bench/dp_compare.py .devbin/
want() { [[ " ${MULTI_GPU_PARTS:-1 2 3 4} " == *" $1 "* ]]; }
for f in .devbin/bench .devbin/trainer .devbin/launch .devbin/dp_smoke.yaml .devbin/torch_ddp.py .devbin/dp_compare.py; do
  [[ -e $f ]] || say "missing from the pack: $f"
done

say "== run_multi_gpu.sh on $(hostname), $(date -u +%FT%TZ), NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
nvidia-smi > "$W/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
nvidia-smi topo -m > "$W/topo.txt" 2>&1 && sed -n 1,4p "$W/topo.txt" | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say "GPUs visible: $NGPU"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1 | tail -1 | tee -a "$SUMMARY"

if want 1; then
# ---- 1. the NCCL communicator test ---------------------------------------------------------------
nccl_test=.devbin/tests/distributed_cuda_nccl_communicator_test
if [[ -x $nccl_test ]]; then
  run nccl_communicator_test 150 "$nccl_test" --gtest_brief=1 --gtest_output="xml:$W/nccl_communicator_test.xml"
  c=$(grep -c '<testcase' "$W/nccl_communicator_test.xml" 2>/dev/null || true)
  f=$(grep -c '<failure' "$W/nccl_communicator_test.xml" 2>/dev/null || true)
  s=$(grep -c 'result="skipped"' "$W/nccl_communicator_test.xml" 2>/dev/null || true)
  say "    nccl_communicator_test: cases=${c:-0} failed=${f:-0} skipped=${s:-0}"
  grep -A6 'Failure' "$W/nccl_communicator_test.log" 2>/dev/null | head -30 | sed 's/^/    /' | tee -a "$SUMMARY"
else
  say "[nccl_communicator_test] SKIPPED: $nccl_test is not in the pack"
fi
for t in .devbin/tests/distributed_cuda_*; do
  [[ -x $t && $t != "$nccl_test" ]] || continue
  run "$(basename "$t")" 120 "$t" --gtest_brief=1
done

fi
if want 2; then
# ---- 2. bench dp on 1 and 2 GPUs, and PyTorch DDP ------------------------------------------------
# Per-GPU batches (weak scaling): 1024, and 4096, the batch of the MLP-4096
# training step that tools/bench train measures on one GPU.
: > "$OUT/dp_table.md"
for batch in ${DP_BATCHES:-1024 4096}; do
  say "== dp benchmark: MLP 4096-4096-4096-4096-10, f32, batch $batch per GPU (weak scaling)"
  j1=$W/dp_coppice_w1_b$batch.json j2=$W/dp_coppice_w2_b$batch.json jt=$W/dp_torch_b$batch.json
  run dp_coppice_1gpu_b$batch 150 .devbin/launch -n 1 -- .devbin/bench dp --device cuda --batch "$batch" --json "$j1"
  grep -E '^\[rank 0\] dp ' "$W/dp_coppice_1gpu_b$batch.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  run dp_coppice_2gpu_b$batch 180 .devbin/launch -n 2 -- .devbin/bench dp --device cuda --batch "$batch" --json "$j2"
  grep -E '^\[rank [01]\] dp ' "$W/dp_coppice_2gpu_b$batch.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  run dp_torch_b$batch 240 python3 .devbin/torch_ddp.py --gpus 1,2 --batch "$batch" --json "$jt"
  grep -E '^dp torch' "$W/dp_torch_b$batch.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  torch_json=()
  [[ -s $jt ]] && torch_json=(--torch "$jt")
  coppice_json=()
  for j in "$j1" "$j2"; do [[ -s $j ]] && coppice_json+=("$j"); done
  if (( ${#coppice_json[@]} > 0 )); then
    echo "### batch $batch per GPU" >> "$OUT/dp_table.md"
    python3 .devbin/dp_compare.py --coppice "${coppice_json[@]}" ${torch_json[@]+"${torch_json[@]}"} \
      --out "$W/dp_table_b$batch.md" > "$W/dp_compare_b$batch.log" 2>&1 ||
      say "[dp_compare b$batch] FAILED: $(tail -2 "$W/dp_compare_b$batch.log")"
    cat "$W/dp_table_b$batch.md" 2>/dev/null | tee -a "$SUMMARY" >> "$OUT/dp_table.md"
  else
    say "[dp_compare b$batch] SKIPPED: no Coppice dp report"
  fi
done

fi
if want 3; then
# ---- 3. the trainer on 2 GPUs (NCCL) against 1 GPU with twice the batch ----------------------------
say "== trainer data-parallel: dp_smoke.yaml on 2 GPUs (batch 128 per rank) vs 1 GPU (batch 256)"
# Each rank gets its own run directory and checkpoint directory, so that
# ranks can never write over each other whatever the trainer does.
cat > "$W/rank_trainer.sh" <<'EOF'
#!/usr/bin/env bash
# tools/launch sets RANK (none: a single process, rank 0); the per-rank directories are named after it.
tag=$1; shift
exec .devbin/trainer --config .devbin/dp_smoke.yaml --run-dir "/tmp/multi_gpu/${tag}_r${RANK:-0}" \
  --set checkpoint.dir="/tmp/multi_gpu/${tag}_ckpt_r${RANK:-0}" --set checkpoint.every_steps=50 \
  --set checkpoint.keep_last=0 "$@"
EOF
chmod +x "$W/rank_trainer.sh"
run trainer_2gpu 200 .devbin/launch -n 2 -- "$W/rank_trainer.sh" dp2 \
  --set distributed.world_size=2 --set distributed.backend=nccl
tail -12 "$W/trainer_2gpu.log" | sed 's/^/    /' >> "$SUMMARY"
run trainer_1gpu 200 "$W/rank_trainer.sh" dp1 --set data.batch_size=256
cat > "$W/compare_losses.py" <<'EOF'
# Per-step train losses of two metrics JSONL files (2 GPUs, 1 GPU): the max
# relative difference, overall and between successive mask updates (a RigL
# update picks among near-tied gradient magnitudes, so float summation order,
# which differs between 1 and 2 GPUs, may change a few picks, and the
# trajectories part from there on).
import json, sys

def read(path):
    losses, updates, summary = {}, [], None
    try:
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("kind") == "train" and r.get("loss") is not None:
                    losses[int(r["step"])] = float(r["loss"])
                    if r.get("mask_update"):
                        updates.append(int(r["step"]))
                elif r.get("kind") == "summary":
                    summary = r
    except OSError as e:
        print(f"    cannot read {path}: {e}")
    return losses, updates, summary

(two, _, s2), (one, upd, s1) = read(sys.argv[1]), read(sys.argv[2])
common = sorted(set(two) & set(one))
print(f"    steps logged: 2 GPUs {len(two)}, 1 GPU {len(one)}, compared {len(common)}")
if not common:
    print("    loss comparison: NOTHING TO COMPARE")
    sys.exit(1)
rel = {s: abs(two[s] - one[s]) / max(abs(one[s]), 1e-12) for s in common}
at = max(rel, key=rel.get)
print(f"    max relative loss difference 2 GPUs vs 1 GPU: {rel[at]:.3e} (step {at}: {two[at]:.6g} vs {one[at]:.6g}); "
      f"max absolute {max(abs(two[s] - one[s]) for s in common):.3e}")
# Segments between mask updates: where (if anywhere) the runs part.
bounds = [b for b in upd if common[0] <= b < common[-1]] + [common[-1]]
lo = common[0]
for hi in bounds:
    seg = [rel[s] for s in common if lo <= s <= hi]
    if seg:
        print(f"    steps {lo}..{hi}: max relative {max(seg):.3e}, mean {sum(seg) / len(seg):.3e}")
    lo = hi + 1
print(f"    first/last loss 2 GPUs {two[common[0]]:.5g} -> {two[common[-1]]:.5g}; "
      f"1 GPU {one[common[0]]:.5g} -> {one[common[-1]]:.5g}")
for tag, r in (("2 GPUs", s2), ("1 GPU", s1)):
    if r:
        print(f"    {tag}: final loss {r.get('final_loss')}, test accuracy {r.get('test_accuracy')}, "
              f"{r.get('samples_per_s', 0):.0f} samples/s over {r.get('time_s', 0):.1f} s")
EOF
python3 "$W/compare_losses.py" "$W/dp2_r0/metrics.jsonl" "$W/dp1_r0/metrics.jsonl" 2>&1 | tee -a "$SUMMARY"
say "    masks, 2 GPUs against 1 GPU, at each checkpoint (updates at steps 0, 50, ...):"
python3 tools/device/compare_masks.py "$W/dp2_ckpt_r0" "$W/dp1_ckpt_r0" 2>&1 | tee -a "$SUMMARY"
# The same 1-GPU job again: how far two runs on one GPU part (cuSPARSE and
# atomics sum in varying order), the yardstick for the comparison above.
run trainer_1gpu_again 200 "$W/rank_trainer.sh" dp1b --set data.batch_size=256
say "    1 GPU against 1 GPU again (read '2 GPUs' below as 'the second 1-GPU run'):"
python3 "$W/compare_losses.py" "$W/dp1b_r0/metrics.jsonl" "$W/dp1_r0/metrics.jsonl" 2>&1 | tee -a "$SUMMARY"
say "    masks, 1 GPU against 1 GPU again:"
python3 tools/device/compare_masks.py "$W/dp1b_ckpt_r0" "$W/dp1_ckpt_r0" 2>&1 | tee -a "$SUMMARY"
[[ -e $W/dp2_r1/metrics.jsonl ]] && say "    note: rank 1 wrote metrics too ($W/dp2_r1/metrics.jsonl)"
[[ -n "$(ls -A "$W/dp2_ckpt_r1" 2>/dev/null)" ]] && say "    note: rank 1 wrote checkpoints too"

fi
# ---- 4. fault test: rank 1 killed, rank 0 must fail within the timeout ----------------------------
say "== fault test: 2 trainer ranks by hand, distributed.timeout_s=20, SIGKILL rank 1 while training"
fault() {
  local d=$W/fault timeout_s=20 margin=25
  mkdir -p "$d"
  local port token
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # Ranks started by hand need the job's token, the same on both (tools/launch makes one itself).
  token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  local args=(--config .devbin/dp_smoke.yaml --set distributed.world_size=2 --set distributed.backend=nccl
              --set distributed.timeout_s=$timeout_s --set training.steps=1000000 --set checkpoint.every_steps=20
              --set logging.every_steps=20)
  local pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port COPPICE_JOB_TOKEN=$token \
      .devbin/trainer "${args[@]}" --run-dir "$d/run_r$r" --set checkpoint.dir="$d/ckpt_r$r" \
      > "$d/rank$r.log" 2>&1 &
    pids+=($!)
  done
  # Training has begun once rank 0 has written a checkpoint; then a few more seconds.
  local waited=0
  while (( waited < 90 )) && [[ -z "$(ls -A "$d/ckpt_r0" 2>/dev/null)" ]]; do
    kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null || break
    sleep 1; waited=$((waited + 1))
  done
  if [[ -z "$(ls -A "$d/ckpt_r0" 2>/dev/null)" ]]; then
    say "[fault_test] FAILED: no checkpoint from rank 0 after ${waited}s (did training start?)"
    tail -5 "$d/rank0.log" | sed 's/^/    rank 0: /' | tee -a "$SUMMARY"
    tail -5 "$d/rank1.log" | sed 's/^/    rank 1: /' | tee -a "$SUMMARY"
    kill -9 "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    return 1
  fi
  sleep 4
  if ! kill -0 "${pids[1]}" 2>/dev/null; then
    say "[fault_test] FAILED: rank 1 had already exited before the kill"
    kill -9 "${pids[0]}" 2>/dev/null; wait "${pids[0]}" 2>/dev/null
    return 1
  fi
  local ckpt_before
  ckpt_before=$(ls "$d/ckpt_r0" | sort | tail -1)
  local t_kill
  t_kill=$(now_ms)
  kill -9 "${pids[1]}"
  wait "${pids[1]}" 2>/dev/null
  local limit_ms=$(( (timeout_s + margin) * 1000 )) hung=0
  while kill -0 "${pids[0]}" 2>/dev/null; do
    if (( $(now_ms) - t_kill >= limit_ms )); then hung=1; break; fi
    sleep 0.2
  done
  local took_ms=$(( $(now_ms) - t_kill ))
  local took="$((took_ms / 1000)).$(( (took_ms % 1000) / 100 ))"
  if (( hung )); then
    kill -9 "${pids[0]}" 2>/dev/null; wait "${pids[0]}" 2>/dev/null
    say "[fault_test] FAILED: rank 0 still running ${took}s after rank 1 was killed (timeout ${timeout_s}s + ${margin}s margin); killed it"
    tail -5 "$d/rank0.log" | sed 's/^/    rank 0: /' | tee -a "$SUMMARY"
    return 1
  fi
  wait "${pids[0]}"
  local rc=$?
  local err
  err=$(grep -iE 'error|nccl|abort|timed out|did not complete|failed' "$d/rank0.log" | tail -2)
  local ckpt_after
  ckpt_after=$(ls "$d/ckpt_r0" 2>/dev/null | sort | tail -1)
  local verdict=ok
  [[ $rc != 0 && -n $err && -n $ckpt_after ]] || verdict=FAILED
  say "[fault_test] $verdict: rank 0 exited with status $rc ${took}s after rank 1 was SIGKILLed (distributed.timeout_s ${timeout_s}; limit allowed ${timeout_s}s + ${margin}s)"
  say "    rank 0's error line(s): ${err:-NONE}"
  say "    last checkpoint of rank 0: ${ckpt_after:-NONE} (before the kill: $ckpt_before); in $d/ckpt_r0: $(ls "$d/ckpt_r0" 2>/dev/null | tr '\n' ' ')"
  [[ $verdict == ok ]]
}
if ! want 4; then
  :
elif [[ $(limit 150) -lt 100 ]]; then
  say "[fault_test] SKIPPED: too close to the ${DEADLINE_S}s deadline"
else
  fault
fi

say "== done in $(elapsed)s"
cp "$SUMMARY" "$W/summary.txt"
tar czf "$OUT/multi_gpu_logs.tgz" --exclude='*.safetensors' -C /tmp multi_gpu 2>/dev/null ||
  echo "tar failed" >> "$SUMMARY"
ls -la "$OUT"
