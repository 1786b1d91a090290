#!/usr/bin/env bash
# Runs on the lent single-GPU machine (nvidia-h100-x1) from the repo root,
# with .devbin_pack carried (tools/device/build_devbin.sh makes it):
#
#   device run, kind nvidia-h100-x1, carry [".devbin_pack"], command
#     tools/device/run_train_bench.sh
#
# Issue 8's training-step comparison in one call: `bench train --device cuda`
# (the MLP 4096-4096-4096-4096-10 at batch 4096, the LeNet-300-100 and ViT
# jobs of configs/; dense, CSR and BSR at 90/95/98 %, 2:4; f32, tf32, bf16)
# and tools/bench/torch_train.py (the same models in PyTorch, dense and
# masked, in the same three modes), then tools/bench/train_compare.py's
# markdown table. Steps: TRAIN_STEPS timed (default 10) after TRAIN_WARMUP
# (default 3) on both sides; with those the whole run takes about 2-4 minutes
# (estimate; each side is also capped by its own time limit, and the run by
# TRAIN_DEADLINE_S, default 450 s, so it stays under the 8 minutes asked).
#
# $OUT gets: summary.txt, train_coppice.json, train_coppice_graph.json, train_torch.json,
# train_table.md and train_logs.tgz (both sides' stderr, nvidia-smi).
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/train_bench
STEPS=${TRAIN_STEPS:-10}
WARMUP=${TRAIN_WARMUP:-3}
DEADLINE_S=${TRAIN_DEADLINE_S:-450}
T0=$(date +%s)
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
# run NAME SECONDS CMD...: CMD with a limit cut to what is left before the deadline, output to $W/NAME.log.
run() {
  local name=$1 want=$2; shift 2
  local left=$(( DEADLINE_S - $(date +%s) + T0 ))
  if (( left < 20 )); then say "[$name] SKIPPED: past the ${DEADLINE_S}s deadline"; return 99; fi
  local t=$(( want < left ? want : left )) s=$(date +%s)
  timeout -k 10 "$t" "$@" > "$W/$name.log" 2>&1
  local rc=$? d=$(( $(date +%s) - s ))
  if [[ $rc == 0 ]]; then say "[$name] ok (${d}s)"
  elif [[ $rc == 124 || $rc == 137 ]]; then say "[$name] FAILED: timed out after ${t}s"
  else say "[$name] exit $rc after ${d}s (a case reported an error; see the JSON); last lines:"
       tail -5 "$W/$name.log" | sed 's/^/    /' | tee -a "$SUMMARY"
  fi
  return $rc
}

if [[ -f .devbin_pack/devbin.tar.zst ]]; then
  LD_LIBRARY_PATH=.devbin_pack/zstd .devbin_pack/zstd/zstd -q -d --long=31 -c .devbin_pack/devbin.tar.zst | tar xf -
fi
for f in .devbin/bench .devbin/torch_train.py .devbin/torch_reference.py .devbin/train_compare.py .devbin/dp_compare.py; do
  [[ -e $f ]] || say "missing from the pack: $f"
done
say "== run_train_bench.sh on $(hostname), $(date -u +%FT%TZ), steps $STEPS after $WARMUP warm-up"
nvidia-smi > "$W/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1 | tee -a "$SUMMARY"

# The job models come from configs/ of the working tree (it travels with the call).
# The job models' configs name Fashion-MNIST, whose files load_job_config
# checks for; bench train only builds the models (synthetic inputs), and the
# dataset (30 MB) does not fit beside the pack in a device call's carry: empty
# stand-ins, made only where the Debian package is absent.
FM=/usr/share/datasets/fashion-mnist
if [[ ! -d $FM ]] && mkdir -p "$FM" 2>/dev/null; then
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    : > "$FM/$f"
  done
fi
run bench_train 300 .devbin/bench train --device cuda --steps "$STEPS" --warmup "$WARMUP" --config-dir configs \
  --json "$OUT/train_coppice.json"
# The same steps replayed from CUDA graphs (bench train --cuda-graph: "<model>+graph" rows).
run bench_train_graph 240 .devbin/bench train --device cuda --steps "$STEPS" --warmup "$WARMUP" --config-dir configs \
  --cuda-graph --json "$OUT/train_coppice_graph.json"
run torch_train 240 python3 .devbin/torch_train.py --device cuda --steps "$STEPS" --warmup "$WARMUP" \
  --json "$OUT/train_torch.json"
grep -h '^train\|^torch train' "$W/bench_train.log" "$W/bench_train_graph.log" "$W/torch_train.log" > "$W/steps.txt" 2>/dev/null
if [[ -s $OUT/train_coppice.json ]]; then
  GRAPH_JSON=(); [[ -s $OUT/train_coppice_graph.json ]] && GRAPH_JSON=("$OUT/train_coppice_graph.json")
  python3 .devbin/train_compare.py --coppice "$OUT/train_coppice.json" "${GRAPH_JSON[@]}" --torch "$OUT/train_torch.json" \
    --out "$OUT/train_table.md" > "$W/compare.log" 2>&1 || say "train_compare failed: $(tail -3 "$W/compare.log")"
  cat "$OUT/train_table.md" 2>/dev/null | tee -a "$SUMMARY"
else
  say "no Coppice JSON; its log ends:"; tail -20 "$W/bench_train.log" | tee -a "$SUMMARY"
fi
say "== done in $(( $(date +%s) - T0 ))s"
tar czf "$OUT/train_logs.tgz" -C "$W" .
