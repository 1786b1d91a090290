#!/usr/bin/env bash
# Runs on the lent 2-GPU machine (nvidia-h200-x2) from the repo root, with
# .devq (tools/device/pack_gpt.sh: the trainer, the corpus) and .devcupti
# carried (the CUPTI tracer built here, and its libcupti:
#   mkdir -p .devcupti && g++ -shared -fPIC -O2 -std=c++17 -I$CUDA/include \
#     tools/device/cupti_trace.cc -L$CUDA/lib -lcupti -o .devcupti/cupti_trace.so &&
#   cp $CUDA/lib/libcupti.so.13 .devcupti/       (CUDA=/usr/local/cuda-13.0)
#
#   device run, kind nvidia-h200-x2, carry [".devq", ".devcupti"], command
#     tools/device/run_dp_timeline.sh
#
# Issue 37's first question, measured before anything changes: where does a
# data-parallel GPT step lose time against one GPU?
#   1. the trainer on 1 GPU and on 2 (tools/launch, NCCL, the same per-rank
#      batch: weak scaling) for DP_STEPS steps (default 300) of each job of
#      DP_JOBS (default gpt_dense gpt_bsr_static_90); the steady-state rate
#      from the metrics' time_s between the middle and the last step, and the
#      efficiency (2-GPU samples/s over twice the 1-GPU's);
#   2. the same runs traced (cupti_trace.so, as CUDA_INJECTION64_PATH: every
#      kernel's and copy's start and end; Nsight Systems is not installed
#      there) for DP_TRACE_STEPS steps (default 60), read by dp_timeline.py:
#      per GPU and step, the GPU's busy and idle time, NCCL's time and the
#      part of it no compute overlaps, the wait for the last bucket, the
#      copies; then each GPU's largest kinds of idle gap, by the kernels on
#      either side (where the GPU waits for the host, and for what);
#   3. with DP_TORCH=1 (default 0), after part 1: the peer in the same call,
#      PyTorch DDP on the same GPT step (tools/bench/torch_ddp.py --model gpt:
#      torch_train.py's GPT, per-rank batch 32 x 512, bf16 autocast, AdamW,
#      clipping at 1.0; NCCL, bucket_cap_mb 25) on 1 GPU and on 2, 30 timed
#      steps after 5 warm-up steps; its table gives the 1-GPU step, the 2-GPU
#      step (the slowest rank's median) and the efficiency (1-GPU / 2-GPU).
#      Needs python3 with torch 2.x and CUDA; adds about a minute.
# DP_WORLDS: the GPU counts to run (default "1 2"; "1 2 4" on a 4-GPU kind,
# issue 38), the first the reference of the efficiencies.
# DP_SET: extra trainer settings for every run, space-separated KEY=VALUE
# (e.g. "distributed.bucket_mb=8"), for an experiment's variant.
# DP_SCALING=0 leaves part 1 out, DP_TRACE_STEPS=0 part 2. $OUT gets dp_timeline.md (the tables),
# summary.txt and the runs' logs (and with DP_TORCH=1 torch_ddp_gpt.log and torch_ddp_gpt.json).
set -uo pipefail
export NCCL_NVLS_ENABLE=0  # the lent machines need NVLink SHARP off
OUT=${OUT:-/tmp/out}
PACK=${GPT_PACK:-.devq}
W=/tmp/dp_timeline
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
say() { echo "$*" | tee -a "$SUMMARY"; }
if [[ ! -x .devbin/trainer ]] && [[ -f $PACK/bins.tar.zst ]]; then
  mkdir -p .devbin && LD_LIBRARY_PATH=$PACK/zstd $PACK/zstd/zstd -q -d --long=31 -c $PACK/bins.tar.zst |
    tar xf - -C .devbin --strip-components=1
fi
CORPUS=/usr/share/doc/linux-doc-6.1/html
if [[ ! -d $CORPUS/_sources ]] && [[ -f $PACK/corpus.tgz ]]; then mkdir -p $CORPUS && tar xzf $PACK/corpus.tgz -C $CORPUS; fi
JOBS=${DP_JOBS:-gpt_dense gpt_bsr_static_90}
STEPS=${DP_STEPS:-300}
TRACE_STEPS=${DP_TRACE_STEPS:-60}
TABLE="$OUT/dp_timeline.md"
say "== run_dp_timeline.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs), $(date -u +%FT%TZ)"

# trainer NAME RANKS STEPS [PREFIX...]: the job's run on RANKS GPUs, metrics every 50 steps, into $W/NAME.
trainer() {
  local job=$1 name=$2 ranks=$3 steps=$4
  shift 4
  local args=(--config configs/$job.yaml --run-dir $W/$name --set "training.steps=$steps"
    --set "logging.metrics=$W/$name/metrics.jsonl" --set "checkpoint.dir=$W/$name/ckpt"
    --set "checkpoint.every_steps=$steps" --set "evaluation.every_steps=$steps" --set "evaluation.max_batches=2"
    --set "logging.every_steps=50" --set "logging.progress=false" --set "lr_schedule.warmup_steps=$((steps / 5))"
    --set "training.cuda_graph=false")  # as data-parallel runs have it: 1 GPU against N like for like
  local kv
  for kv in ${DP_SET:-}; do args+=(--set "$kv"); done
  if [[ $ranks == 1 ]]; then
    timeout 300 "$@" .devbin/trainer "${args[@]}" > "$OUT/$name.log" 2>&1
  else
    timeout 300 "$@" python3 tools/launch -n "$ranks" -- .devbin/trainer "${args[@]}" \
      --set distributed.world_size=$ranks --set distributed.backend=nccl > "$OUT/$name.log" 2>&1
  fi
  local rc=$?
  [[ $rc == 0 ]] || { say "$name: exit $rc"; tail -3 "$OUT/$name.log" | tee -a "$SUMMARY"; }
  return $rc
}

# rate NAME RANKS: samples/s between the middle step and the last, from metrics.jsonl.
rate() {
  python3 - "$W/$1/metrics.jsonl" "$2" "$STEPS" <<'EOF'
import json, sys
path, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = {}
for line in open(path):
    r = json.loads(line)
    if r.get("kind") == "train":
        rows[r["step"]] = r
lo = min((s for s in rows if s >= steps // 2), default=None)
hi = max(rows, default=None)
if lo is None or hi is None or hi <= lo:
    print("nan")
else:
    per_step = (rows[hi]["time_s"] - rows[lo]["time_s"]) / (hi - lo)
    print(f"{per_step * 1000:.2f}")
EOF
}

read -r -a WORLDS <<< "${DP_WORLDS:-1 2}"  # the first is the reference (1)
{
  echo "### Weak scaling, the trainer's steady state (steps $((STEPS / 2))-$STEPS)"
  echo
  head="| job |" rule="|---|"
  for n in "${WORLDS[@]}"; do head+=" $n GPU ms a step |"; rule+="---:|"; done
  for n in "${WORLDS[@]:1}"; do head+=" efficiency x$n (${WORLDS[0]}-GPU step / $n-GPU step) |"; rule+="---:|"; done
  echo "$head"
  echo "$rule"
} > "$TABLE"
for job in $JOBS; do
  [[ ${DP_SCALING:-1} == 1 ]] || break  # DP_SCALING=0: the timelines alone
  row="| $job |" effs="" ref=""
  for n in "${WORLDS[@]}"; do
    trainer "$job" "${job}_x$n" "$n" "$STEPS"
    ms=$(rate "${job}_x$n" "$n")
    row+=" $ms |"
    if [[ -z $ref ]]; then
      ref=$ms
    else
      effs+=" $(python3 -c "a,b='$ref','$ms'; print('%.3f' % (float(a)/float(b)) if 'nan' not in (a+b) else 'n/a')") |"
    fi
  done
  echo "$row$effs" >> "$TABLE"
done

if [[ ${DP_TORCH:-0} == 1 ]]; then  # part 3: PyTorch DDP on the same GPT step, in the same call
  timeout 300 python3 tools/bench/torch_ddp.py --model gpt --gpus "$(IFS=,; echo "${WORLDS[*]}")" --steps 30 --warmup 5 \
    --json "$W/torch_ddp_gpt.json" > "$OUT/torch_ddp_gpt.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || { say "torch_ddp_gpt: exit $rc"; tail -3 "$OUT/torch_ddp_gpt.log" | tee -a "$SUMMARY"; }
  [[ -f $W/torch_ddp_gpt.json ]] && cp "$W/torch_ddp_gpt.json" "$OUT/"
  python3 - "$W/torch_ddp_gpt.json" "${WORLDS[@]}" >> "$TABLE" <<'EOF'
import json, sys
worlds = [int(w) for w in sys.argv[2:]]
try:
    rows = {r["world_size"]: r for r in json.load(open(sys.argv[1]))["results"] if r.get("op") == "gpt_dense"}
except (OSError, ValueError, KeyError) as e:
    rows = {}
    print(f"\n(torch_ddp.py wrote no usable JSON: {type(e).__name__})")


def ms(world):
    """The slowest rank's median step (the median itself on 1 GPU), or None and why not."""
    r = rows.get(world)
    if not r or r.get("status") != "ok":
        return None, (r or {}).get("status", "not run")
    return r["slowest_rank_median_ms"], "ok"


steps = [ms(w) for w in worlds]
r = next((rows[w] for w in worlds if w in rows), {})
print()
print("### PyTorch DDP, GPT dense (same call)")
print()
print(f"tools/bench/torch_ddp.py --model gpt: per-rank batch {r.get('batch_per_rank', '?')} x "
      f"{r.get('seq_len', r.get('shape', [0, '?'])[-1])} tokens, bf16 autocast over f32 parameters, AdamW, "
      f"clipping at 1.0; DDP with NCCL, bucket_cap_mb 25; medians of 30 steps after 5 warm-up steps "
      f"(the slowest rank's on several GPUs).")
print()
head = "| job |" + "".join(f" {w} GPU ms a step |" for w in worlds)
head += "".join(f" efficiency x{w} ({worlds[0]}-GPU step / {w}-GPU step) |" for w in worlds[1:])
print(head)
print("|---|" + "---:|" * (2 * len(worlds) - 1))
cells = [f"{t:.2f}" if t else why for t, why in steps]
ref = steps[0][0]
effs = [f"{ref / t:.3f}" if ref and t else "n/a" for t, _ in steps[1:]]
print("| gpt_dense (PyTorch DDP) | " + " | ".join(cells + effs) + " |")
EOF
fi

{
  echo
  echo "### GPU timelines (CUPTI), per GPU, medians over steps 21-$TRACE_STEPS (ms)"
  echo
} >> "$TABLE"
first=1
for job in $JOBS; do
  (( TRACE_STEPS > 0 )) || break  # DP_TRACE_STEPS=0: the scaling alone
  for ranks in "${WORLDS[@]}"; do
    name="${job}_trace_x$ranks"
    mkdir -p "$W/$name.traces"
    CUDA_INJECTION64_PATH=$PWD/.devcupti/cupti_trace.so COPPICE_CUPTI_TRACE_DIR=$W/$name.traces \
      LD_LIBRARY_PATH=$PWD/.devcupti:${LD_LIBRARY_PATH:-} trainer "$job" "$name" "$ranks" "$TRACE_STEPS"
    if ls "$W/$name.traces"/trace.*.tsv > /dev/null 2>&1; then
      python3 tools/device/dp_timeline.py "$W/$name.traces" --skip 20 --label "$job x$ranks" > "$W/$name.md" 2>&1
      python3 tools/device/dp_timeline.py "$W/$name.traces" --skip 20 --label "$job x$ranks" --gaps 6 |
        tail -n +$(( $(wc -l < "$W/$name.md") + 1 )) >> "$W/gaps.md" 2>&1
      if [[ $first == 1 ]]; then cat "$W/$name.md" >> "$TABLE"; first=0; else tail -n +3 "$W/$name.md" >> "$TABLE"; fi
    else
      say "$name: no trace"
    fi
  done
done
[[ -f $W/gaps.md ]] && cat "$W/gaps.md" >> "$TABLE"
tee -a "$SUMMARY" < "$TABLE"
