#!/usr/bin/env bash
# Runs on the lent single-GPU machine from the repo root: the GPT job's step
# beside PyTorch and its training runs (issue 18). Carry a folder made by
# tools/device/pack_gpt.sh (default .devq: the trainer and bench, the corpus,
# the Python peers):
#
#   device run, carry [".devq"], command  tools/device/run_gpt.sh bench
#   device run, carry [".devq"], command  GPT_STEPS=1500 tools/device/run_gpt.sh train gpt_dense gpt_bsr_static_90
#   device run (same warm machine), command  tools/device/run_gpt.sh eval gpt_dense
#
# bench: `bench train --models gpt` (dense and BSR 90/95/98 %, bf16; other
#        formats with GPT_FORMATS, e.g. dense,nm for the 2:4 tensor-core path,
#        and GPT_TORCH_FORMATS for PyTorch's side) and
#        torch_train.py's gpt (dense and masked) in one call -> gpt_step.md,
#        and one profiled step of each (COPPICE_PROFILE=1);
#        `bench attention` beside torch_reference.py attention -> attention.md.
# attention: `bench attention` once, beside torch_reference.py attention three
#        times, its causal rows under each SDPA backend (--sdpa-backend):
#        flash (FlashAttention-2), cudnn (cuDNN's fused attention) and default
#        (no sdpa_kernel: what PyTorch picks itself) -> attention_<backend>.md.
#        GPT_ATTENTION_PINS: route pins (COPPICE_ROUTES lists, space-separated,
#        e.g. attention_dq=recompute) under each of which `bench attention`
#        runs again, beside the default backend's rows -> attention_pin<i>.md.
# attention_ab: `bench attention` of this pack's bench against bench_base,
#        beside PyTorch's dense SDPA, and Nsight Compute's warp states of the
#        kernels GPT_ATTENTION_KERNELS names in each build -> attention_ab.md.
# gaps: where the GPU idles in the step and what the host was in as each gap
#        began (cupti_trace.so with .devcupti carried, dp_timeline.py --gaps),
#        eager and from a CUDA graph -> gaps.md.
# kernels JOB_A JOB_B: two jobs' trainer runs (GPT_STEPS steps, default
#        200, no fewer than the jobs' 200 warm-up steps unless GPT_SETS lowers
#        lr_schedule.warmup_steps; a RigL job's mask updates end at step 3/4
#        of them) traced by cupti_trace.so (carry .devcupti), each kernel's
#        ms a step in the middle of each run side by side
#        (trace_kernel_sums.py) -> kernels.md: what a pattern or a setting
#        costs by kernel. GPT_KERNELS_ROUTES_A and _B: COPPICE_ROUTES for
#        the first and the second run alone (say one job under two pins).
# train JOB...: each job's trainer run (any job of configs/; the image jobs
#        need a pack made with GPT_PACK_DATA=fashion_mnist) (GPT_STEPS steps when set: training.steps,
#        the RigL end step at 3/4 of it, checkpoints at the end; GPT_SETS: more
#        "key=value" overrides, GPT_TAG: a suffix of the run's name), its
#        metrics.jsonl and summary to $OUT; runs/ stays on the machine for eval.
# tests: the test binaries carried by pack_gpt.sh (GPT_PACK_TESTS), the demo
#        and the GPU suite's two trainer jobs.
# step: issue 31's table: Coppice's GPT step (SGD: dense, BSR 90 % 32x32 and
#        64x64, 2:4; AdamW with clipping: dense) beside PyTorch's eager and
#        torch.compile'd dense step, the dense and BSR steps from a CUDA graph
#        (forward and backward replayed, train/graph_step.h), the BSR
#        products at the GPT's shapes (1024 x 1024, 4096 x 1024, 1024 x 4096
#        weights, 16384 tokens) against their byte floor
#        (GPT_PRODUCTS=0 leaves them out), and the trainer's own step on
#        gpt_dense -> gpt_step.md and a line with the trainer's ms a step.
# mlp: the MLP-4096 bf16 step (dense, BSR 90 %) beside PyTorch's -> mlp_step.md.
# ab: this pack's bench against bench_base (pack_gpt.sh GPT_PACK_BASE=REV),
#        or against itself under GPT_AB_BASE_ROUTES' route pins (e.g.
#        residual_add=apart),
#        alternated in one call: the GPT step (`bench train`, SGD, bf16,
#        GPT_AB_ARGS, default BSR 90 % in 64x64 blocks) GPT_AB_ROUNDS times
#        (default 3) each, then, unless GPT_AB_PRODUCTS=0, `bench bsr`'s
#        products at the GPT's shapes (90 %, in GPT_AB_BLOCK blocks, default
#        64) once each -> ab.md (each
#        round's ms and loss, the medians, and the products side by side).
# bound: what bounds the BSR products at the GPT's shapes (Nsight Compute,
#        ncu_bound.py): for each block of GPT_BOUND_BLOCKS (default "32 64")
#        and weight of GPT_BOUND_SHAPES (default 1024x4096, fc2's), `bench
#        bsr` at 90 %, bf16, 16384 tokens: three launches of the plain
#        product (x W^T) and two of the weight gradient's SDDMM, each with
#        its duration, L2 and DRAM throughput (% of peak), L2 reads and DRAM
#        bytes -> bound.md.
# breakdown: one step's GPU time by kernel (Nsight Compute, kernel_breakdown.py)
#        for Coppice's BSR 90 % and dense steps and PyTorch's dense step, the
#        profiled runs taking the routes a plain run chose (bench --routes-in)
#        -> breakdown_*.md (GPT_BREAKDOWN_FORMATS: Coppice's formats, default
#        "bsr dense"; GPT_BREAKDOWN_BLOCK: the BSR block size, default 32;
#        the sparse products' launches listed by tile and grid too;
#        GPT_BREAKDOWN_TORCH=0 leaves PyTorch's out).
# blocks: the GPT step (SGD) with BSR weights at each block size of GPT_BLOCKS
#        (default "64 128") and sparsity of GPT_SPARSITIES (default "0.5 0.75
#        0.9"), beside Coppice's dense step and PyTorch's eager and
#        torch.compile'd dense step (GPT_BLOCKS_STEP=0 leaves the steps out),
#        and the BSR products at the GPT's shapes (GPT_BLOCKS_SHAPES) at the
#        same blocks and sparsities under each BSR kernel pin of
#        GPT_BLOCKS_PINS (default "auto": wgmma wherever it runs; "mma_sync": no
#        wgmma)
#        -> blocks_step.md, blocks_products.md.
# torch: coppice.torch on the GPU (issue 34), with .devbin_py (pack_python.sh)
#        carried too: python/tests/test_torch.py and test_dlpack_cuda.py on
#        CUDA; torch_train.py's GPT step dense beside coppice_bsr (sparsify_,
#        BSR at GPT_TORCH_SPARSITIES, default 0.9, in GPT_TORCH_BLOCK blocks,
#        default 64; bf16 autocast), each eager and under torch.compile in
#        the GPT_TORCH_COMPILE modes (default: default,reduce-overhead; the
#        latter replays CUDA graphs, Coppice's kernels recorded into them),
#        with GPT_TORCH_GRAPH=1 also the whole step captured in one CUDA graph
#        (torch_train.py --cuda-graph) -> torch_step.md; then 300 steps (GPT_STEPS) of train_gpt_torch.py
#        eager with --sparsify bsr:0.1:32 beside the trainer's
#        gpt_bsr_static_90, and the same pair dense, their loss curves
#        -> torch_curves.md (GPT_TORCH_CURVES=0 leaves them out).
# moe: issue 36's mixture-of-experts step: `bench train --models gpt,gpt_moe`
#        (configs/gpt_moe.yaml's model: 8 experts, top-1, dropless grouped
#        block-sparse experts) beside torch_train.py's gpt and gpt_moe (the
#        same MoE as a loop over experts; then with --moe-impl grouped,
#        torch._grouped_mm), bf16, SGD -> moe_step.md.
# eval JOB...: the newest checkpoint of each job's run evaluated by
#        eval_gpt_torch.py (PyTorch), beside the trainer's last validation loss.
# sweep SWEEP.yaml: tools/sweep run of that file with the pack's trainer
#        (into runs/sweeps/<its stem>), every finished run's newest checkpoint
#        evaluated by eval_gpt_torch.py, and tools/sweep frontier; the runs'
#        metrics, sweep_done.json, frontier.jsonl and .png -> sweep_runs.tgz.
#
# GPT_GELU (step, mlp and breakdown; default erf): the GPT's GELU on both
# sides, erf (exact) or tanh (GPT-2's approximation: bench train --gelu tanh,
# torch_train.py --gelu tanh, the trainer's model.options.gelu). With tanh,
# step also times Coppice's dense step with the erf GELU, for reference.
set -uo pipefail
OUT=${OUT:-/tmp/out}
PACK=${GPT_PACK:-.devq}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
say() { echo "$*" | tee -a "$SUMMARY"; }
# The device tool brings back at most 8 files of $OUT, so on exit the tables
# (*.md), the summary and the archives stay as they are and every other file
# goes into one archive, gpt_files_<step>.tgz (a second run_gpt.sh in the
# same call bundles only what it wrote; a run of run_gpu_suite.sh before it
# leaves its summary and gpu_logs.tgz alone, its few other files bundled).
bundle_out() {
  local files=() f
  for f in "$OUT"/*; do
    [[ -f $f ]] || continue
    case ${f##*/} in summary.txt | *.md | *.tgz | *.png | *.ncu-rep) ;; *) files+=("${f##*/}") ;; esac
  done
  ((${#files[@]})) || return 0
  tar czf "$OUT/gpt_files_${what:-none}.tgz" -C "$OUT" "${files[@]}" && (cd "$OUT" && rm -f "${files[@]}")
}
trap bundle_out EXIT
# eval_run NAME DIR: DIR's newest checkpoint evaluated by eval_gpt_torch.py
# (PyTorch), beside the trainer's last validation loss in DIR/metrics.jsonl.
eval_run() {
  local ckpt
  ckpt=$(ls -t "$2"/checkpoints/ckpt-*.safetensors 2>/dev/null | head -1)
  [[ -n $ckpt ]] || { say "$1: no checkpoint"; return; }
  say "$1: $ckpt; the trainer's last eval: $(grep '"kind":"eval"' "$2"/metrics.jsonl | tail -1)"
  PYTHONUNBUFFERED=1 timeout 300 python3 $PACK/eval_gpt_torch.py "$ckpt" --corpus $CORPUS/_sources \
    --max-batches 16 --batch 32 --device cuda 2>&1 | tail -3 | tee -a "$SUMMARY"
}
# The two sides of ab and attention_ab. The base side: bench_base, or with
# GPT_AB_BASE_ROUTES (a COPPICE_ROUTES list) this pack's bench under those
# pins (one build, a route against the planner's choice). ab_sides STEP
# checks that the base side exists (exiting, named by STEP, if not);
# ab_bench SIDE (base or this) prints that side's binary and environment.
base_routes=${GPT_AB_BASE_ROUTES:-}
ab_sides() {
  [[ -n $base_routes || -x .devbin/bench_base ]] ||
    { say "$1: no bench_base in the pack (pack_gpt.sh with GPT_PACK_BASE=REV)"; exit 1; }
  [[ -n $base_routes ]] && say "$1: the base side is this bench with COPPICE_ROUTES=$base_routes"
  return 0
}
ab_bench() {
  if [[ $1 == this ]]; then echo "env .devbin/bench";
  elif [[ -n $base_routes ]]; then echo "env COPPICE_ROUTES=$base_routes .devbin/bench";
  else echo "env .devbin/bench_base"; fi
}
# job_args JOB RUN STEPS [KEY=VALUE...]: the trainer's arguments for
# configs/JOB.yaml into runs/RUN (metrics and checkpoints there), in the
# global array args: with STEPS (empty: the job's own), training.steps, a
# checkpoint at the end and a RigL job's last mask update at 3/4 of them;
# then the KEY=VALUE overrides given, then GPT_SETS's.
job_args() {
  local job=$1 run=$2 steps=$3 kv
  shift 3
  args=(--config configs/$job.yaml --run-dir runs/$run --set "logging.metrics=runs/$run/metrics.jsonl"
    --set "checkpoint.dir=runs/$run/checkpoints")
  if [[ -n $steps ]]; then
    args+=(--set "training.steps=$steps" --set "checkpoint.every_steps=$steps")
    [[ $job == *rigl* ]] && args+=(--set "mask_update.end_step=$((steps * 3 / 4))")
  fi
  for kv in "$@" ${GPT_SETS:-}; do args+=(--set "$kv"); done
}
if [[ ! -x .devbin/trainer ]] && [[ -f $PACK/bins.tar.zst ]]; then
  mkdir -p .devbin && LD_LIBRARY_PATH=$PACK/zstd $PACK/zstd/zstd -q -d --long=31 -c $PACK/bins.tar.zst | tar xf - -C .devbin --strip-components=1
fi
CORPUS=/usr/share/doc/linux-doc-6.1/html
if [[ ! -d $CORPUS/_sources ]] && [[ -f $PACK/corpus.tgz ]]; then mkdir -p $CORPUS && tar xzf $PACK/corpus.tgz -C $CORPUS; fi
if [[ ! -d /usr/share/datasets/fashion-mnist ]] && [[ -f $PACK/fashion_mnist.tar ]]; then
  mkdir -p /usr/share/datasets && tar xf $PACK/fashion_mnist.tar -C /usr/share/datasets
fi
say "== run_gpt.sh $* on $(nvidia-smi --query-gpu=name --format=csv,noheader), $(date -u +%FT%TZ)"
GELU=${GPT_GELU:-erf}
what=${1:-bench}
shift || true
case "$what" in
  bench)
    timeout 300 .devbin/bench train --device cuda --models gpt --formats "${GPT_FORMATS:-dense,bsr}" --modes bf16 \
      --steps 5 --warmup 2 \
      --json "$OUT/gpt_coppice.json" > "$OUT/bench_gpt.log" 2>&1 || say "bench train gpt: exit $?"
    PYTHONUNBUFFERED=1 timeout 240 python3 $PACK/torch_train.py --device cuda --models gpt \
      --formats "${GPT_TORCH_FORMATS:-dense,bsr}" \
      --modes bf16 --steps 5 --warmup 2 --json "$OUT/gpt_torch.json" > "$OUT/torch_gpt.log" 2>&1 || say "torch gpt: exit $?"
    python3 $PACK/train_compare.py --coppice "$OUT/gpt_coppice.json" --torch "$OUT/gpt_torch.json" > "$OUT/gpt_step.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/gpt_step.md"
    for f in dense bsr; do
      COPPICE_PROFILE=1 timeout 120 .devbin/bench train --device cuda --models gpt --formats $f --modes bf16 --steps 2 \
        --warmup 1 > /dev/null 2> "$OUT/profile_$f.log" || say "profile $f: exit $?"
    done
    timeout 120 .devbin/bench attention --json "$OUT/att_coppice.json" > "$OUT/bench_att.log" 2>&1 || say "bench attention: exit $?"
    PYTHONUNBUFFERED=1 timeout 150 python3 $PACK/torch_reference.py attention --json "$OUT/att_torch.json" \
      > "$OUT/torch_att.log" 2>&1 || say "torch attention: exit $?"
    python3 $PACK/compare.py "$OUT/att_coppice.json" "$OUT/att_torch.json" > "$OUT/attention.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/attention.md"
    ;;
  attention)
    # Issue 31: Coppice's attention beside SDPA's flash kernel, cuDNN's fused
    # attention and SDPA's own pick (the block_sparse rows are the same each time).
    timeout 120 .devbin/bench attention --json "$OUT/att_coppice.json" > "$OUT/bench_att.log" 2>&1 || say "bench attention: exit $?"
    for b in flash cudnn default; do
      PYTHONUNBUFFERED=1 timeout 150 python3 $PACK/torch_reference.py attention --sdpa-backend $b \
        --json "$OUT/att_torch_$b.json" > "$OUT/torch_att_$b.log" 2>&1 || say "torch attention $b: exit $?"
      python3 $PACK/compare.py "$OUT/att_coppice.json" "$OUT/att_torch_$b.json" > "$OUT/attention_$b.md" 2>&1
      say "== attention: Coppice beside PyTorch SDPA, causal rows under --sdpa-backend $b"
      tee -a "$SUMMARY" < "$OUT/attention_$b.md"
    done
    i=0
    for pin in ${GPT_ATTENTION_PINS:-}; do
      i=$((i + 1))
      COPPICE_ROUTES=$pin timeout 120 .devbin/bench attention --json "$OUT/att_coppice_pin$i.json" \
        > "$OUT/bench_att_pin$i.log" 2>&1 || say "bench attention under $pin: exit $?"
      python3 $PACK/compare.py "$OUT/att_coppice_pin$i.json" "$OUT/att_torch_default.json" > "$OUT/attention_pin$i.md" 2>&1
      say "== attention: Coppice under COPPICE_ROUTES=$pin beside PyTorch SDPA (default backend)"
      tee -a "$SUMMARY" < "$OUT/attention_pin$i.md"
    done
    ;;
  tests)
    # The test binaries pack_gpt.sh carried (GPT_PACK_TESTS), and the GPU
    # suite's demo and trainer smoke jobs.
    # GPT_TEST_TIMEOUT (default 300 s) a binary, so that a test that hangs
    # (a kernel waiting on a barrier no one arrives at) leaves the call's
    # other work its time; bsr_mma_test takes about 75 s on an H200.
    for t in .devbin/tests/*; do
      [[ -x $t ]] || continue
      timeout "${GPT_TEST_TIMEOUT:-300}" "$t" --gtest_brief=1 > "$OUT/$(basename "$t").log" 2>&1
      rc=$?  # before the line below: its $(basename) would reset $? (124: timed out)
      say "$(basename "$t"): exit $rc ($(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$(basename "$t").log" | tr '\n' ' '))"
    done
    .devbin/mlp_demo --device cuda > "$OUT/demo.txt" 2>&1
    say "mlp_demo: exit $?"
    for job in gpu_smoke gpu_smoke_bsr; do
      .devbin/trainer --config tools/device/$job.yaml --run-dir runs/$job --set "checkpoint.dir=runs/$job/ckpt" \
        > "$OUT/$job.txt" 2>&1
      say "trainer $job: exit $? ($(grep -E '^trained' "$OUT/$job.txt"))"
    done
    ;;
  step)
    # Issue 31's step table: Coppice's GPT step (SGD as torch_train.py; dense,
    # BSR 90 % at 32x32 and, where bench has --block, 64x64, 2:4) and its
    # AdamW + clipping step (the jobs' update), PyTorch's eager and
    # torch.compile'd dense step, and the trainer's own step on gpt_dense
    # (GPT_TRAIN_STEPS, default 300; ms a step from its metrics between step
    # 100 and the last record, so start-up, warm-up and autotuning stay out).
    B=.devbin/bench
    timeout 300 $B train --device cuda --models gpt --gelu "$GELU" --formats dense,bsr,nm --sparsity 0.9 --modes bf16 \
      --steps 10 --warmup 3 --json "$OUT/gpt_coppice.json" > "$OUT/bench_gpt.log" 2>&1 || say "bench train gpt: exit $?"
    jsons=("$OUT/gpt_coppice.json")
    if [[ $GELU != erf ]]; then
      timeout 200 $B train --device cuda --models gpt --formats dense --modes bf16 --steps 10 --warmup 3 \
        --json "$OUT/gpt_coppice_erf.json" > "$OUT/bench_gpt_erf.log" 2>&1 || say "bench train gpt erf: exit $?"
      grep -h "^train " "$OUT/bench_gpt_erf.log" | sed 's/^/the same, erf GELU: /' | tee -a "$SUMMARY"
    fi
    if timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats bsr --sparsity 0.9 --modes bf16 --block 64 \
      --steps 10 --warmup 3 --json "$OUT/gpt_coppice_b64.json" > "$OUT/bench_gpt_b64.log" 2>&1; then
      jsons+=("$OUT/gpt_coppice_b64.json")
    else say "bench train gpt --block 64: exit $? ($(tail -1 "$OUT/bench_gpt_b64.log"))"; fi
    timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats dense,bsr --sparsity 0.9 --modes bf16 \
      --cuda-graph --steps 10 --warmup 3 --json "$OUT/gpt_coppice_graph.json" > "$OUT/bench_gpt_graph.log" 2>&1 &&
      jsons+=("$OUT/gpt_coppice_graph.json") || say "bench train gpt --cuda-graph: exit $?"
    timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats bsr --sparsity 0.9 --modes bf16 --block 64 \
      --cuda-graph --steps 10 --warmup 3 --json "$OUT/gpt_coppice_b64_graph.json" > "$OUT/bench_gpt_b64_graph.log" 2>&1 &&
      jsons+=("$OUT/gpt_coppice_b64_graph.json") || say "bench train gpt --block 64 --cuda-graph: exit $?"
    timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats dense --modes bf16 --optimizer adamw \
      --steps 10 --warmup 3 --json "$OUT/gpt_coppice_adamw.json" > "$OUT/bench_gpt_adamw.log" 2>&1 &&
      jsons+=("$OUT/gpt_coppice_adamw.json") || say "bench train gpt adamw: exit $?"
    PYTHONUNBUFFERED=1 timeout 300 python3 $PACK/torch_train.py --device cuda --models gpt --gelu "$GELU" --formats dense \
      --modes bf16 --steps 10 --warmup 3 --compile "${GPT_COMPILE:-default}" --json "$OUT/gpt_torch.json" \
      > "$OUT/torch_gpt.log" 2>&1 || say "torch gpt: exit $?"
    grep -h "compiled" "$OUT/torch_gpt.log" | tee -a "$SUMMARY"
    python3 -c 'import json,sys; [print("torch.compile", r["compile"], "compile_s", r["compile_s"]) for r in json.load(open(sys.argv[1]))["results"] if r.get("compile")]' "$OUT/gpt_torch.json" | tee -a "$SUMMARY"
    python3 $PACK/train_compare.py --coppice "${jsons[@]}" --torch "$OUT/gpt_torch.json" > "$OUT/gpt_step.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/gpt_step.md"
    # The BSR products at the GPT's shapes (16384 tokens; the weights [out,
    # in] 1024 x 1024 of attention's projection, 4096 x 1024 of fc1, 1024 x
    # 4096 of fc2; qkv's 3072 x 1024 sits between), with their fraction of the
    # byte floor.
    if [[ ${GPT_PRODUCTS:-1} == 1 ]]; then
      for shape in 1024x1024 4096x1024 1024x4096; do
        timeout 200 $B bsr --hidden ${shape%x*} --in ${shape#*x} --batch 16384 --dtype bf16 \
          --json "$OUT/bsr_gpt_$shape.json" > "$OUT/bsr_gpt_$shape.log" 2>&1 || say "bench bsr at $shape: exit $?"
      done
      python3 tools/device/bsr_product_table.py "$OUT"/bsr_gpt_*.json | tee -a "$SUMMARY"
    fi
    steps=${GPT_TRAIN_STEPS:-300}
    timeout 300 .devbin/trainer --config configs/gpt_dense.yaml --run-dir runs/step_dense \
      --set "logging.metrics=runs/step_dense/metrics.jsonl" --set "checkpoint.dir=runs/step_dense/checkpoints" \
      --set "training.steps=$steps" --set "checkpoint.every_steps=$steps" --set "evaluation.every_steps=$((steps * 10))" \
      --set "logging.every_steps=50" --set "model.options.gelu=$GELU" ${GPT_TRAIN_SETS:-} > "$OUT/trainer_step.log" 2>&1 ||
      say "trainer gpt_dense: exit $?"
    python3 - "runs/step_dense/metrics.jsonl" "$GELU" <<'PY' | tee -a "$SUMMARY"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l.replace(" ", "")]
recs = [r for r in recs if r["step"] >= 100]
if len(recs) >= 2:
    a, b = recs[0], recs[-1]
    print(f"trainer gpt_dense: {1e3 * (b['time_s'] - a['time_s']) / (b['step'] - a['step']):.2f} ms a step "
          f"(steps {a['step']}-{b['step']}, AdamW + clipping, bf16, {sys.argv[2]} GELU)")
else:
    print("trainer gpt_dense: too few train records")
PY
    ;;
  blocks)
    # The step at each block size and sparsity (GPT_BLOCKS_STEP=0 leaves it
    # out) and the products, under each BSR kernel pin of GPT_BLOCKS_PINS
    # (default "auto"; "mma_sync" keeps Hopper's products off wgmma).
    B=.devbin/bench
    jsons=()
    steps=${GPT_BLOCKS_STEP:-1}
    if [[ $steps == 1 ]]; then
      timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats dense --modes bf16 --steps 10 --warmup 3 \
        --json "$OUT/blocks_dense.json" > "$OUT/blocks_dense.log" 2>&1 && jsons+=("$OUT/blocks_dense.json") ||
        say "bench train gpt dense: exit $?"
    fi
    for block in ${GPT_BLOCKS:-64 128}; do
      for sp in ${GPT_SPARSITIES:-0.5 0.75 0.9}; do
        if [[ $steps == 1 ]]; then
          if timeout 200 $B train --device cuda --models gpt --gelu "$GELU" --formats bsr --sparsity "$sp" --modes bf16 \
            --block "$block" --steps 10 --warmup 3 --json "$OUT/blocks_b${block}_s$sp.json" \
            > "$OUT/blocks_b${block}_s$sp.log" 2>&1; then
            jsons+=("$OUT/blocks_b${block}_s$sp.json")
          else say "bench train gpt --block $block --sparsity $sp: exit $? ($(tail -1 "$OUT/blocks_b${block}_s$sp.log"))"; fi
        fi
        for pin in ${GPT_BLOCKS_PINS:-auto}; do
          for shape in ${GPT_BLOCKS_SHAPES:-1024x1024 4096x1024 1024x4096}; do
            COPPICE_ROUTES=bsr_tiles=$pin timeout 200 $B bsr --hidden ${shape%x*} --in ${shape#*x} --batch 16384 \
              --dtype bf16 --block "$block" --sparsity "$sp" \
              --json "$OUT/blocks_products_${pin//_/-}_b${block}_s${sp}_$shape.json" > /dev/null 2>&1 ||
              say "bench bsr $shape --block $block --sparsity $sp ($pin): exit $?"
          done
        done
      done
    done
    if [[ $steps == 1 ]]; then
      PYTHONUNBUFFERED=1 timeout 300 python3 $PACK/torch_train.py --device cuda --models gpt --gelu "$GELU" \
        --formats dense --modes bf16 --steps 10 --warmup 3 --compile "${GPT_COMPILE:-default}" \
        --json "$OUT/blocks_torch.json" > "$OUT/blocks_torch.log" 2>&1 || say "torch gpt: exit $?"
      python3 $PACK/train_compare.py --coppice "${jsons[@]}" --torch "$OUT/blocks_torch.json" > "$OUT/blocks_step.md" 2>&1
      tee -a "$SUMMARY" < "$OUT/blocks_step.md"
    fi
    tables=()
    for f in "$OUT"/blocks_products_*.json; do
      pin=$(basename "$f"); pin=${pin#blocks_products_}; tables+=("${pin%%_b*}=$f")
    done
    python3 tools/device/bsr_product_table.py "${tables[@]}" | tee "$OUT/blocks_products.md" | tee -a "$SUMMARY"
    ;;
  ab)
    ab_sides ab
    read -r -a ab_args <<< "${GPT_AB_ARGS:---formats bsr --sparsity 0.9 --block 64}"
    for r in $(seq 1 "${GPT_AB_ROUNDS:-3}"); do
      for side in base this; do
        timeout 200 $(ab_bench $side) train --device cuda --models gpt --gelu "$GELU" --modes bf16 "${ab_args[@]}" \
          --steps 10 --warmup 3 --json "$OUT/ab_step_${side}_$r.json" > "$OUT/ab_step_${side}_$r.log" 2>&1 ||
          say "ab: bench train ($side, round $r): exit $?"
      done
    done
    if [[ ${GPT_AB_PRODUCTS:-1} == 1 ]]; then
      for shape in 1024x1024 4096x1024 1024x4096 3072x1024; do
        for side in base this; do
          timeout 200 $(ab_bench $side) bsr --hidden ${shape%x*} --in ${shape#*x} --batch 16384 --dtype bf16 \
            --block "${GPT_AB_BLOCK:-64}" --sparsity 0.9 --json "$OUT/ab_bsr_${side}_$shape.json" > "$OUT/ab_bsr_${side}_$shape.log" 2>&1 ||
            say "ab: bench bsr at $shape ($side): exit $?"
        done
      done
    fi
    python3 tools/device/ab_table.py "$OUT" > "$OUT/ab.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/ab.md"
    ;;
  attention_ab)
    # Issue 31's attention kernels, two sides (ab_sides): this pack's bench and
    # bench_base (pack_gpt.sh with GPT_PACK_BASE or GPT_PACK_BASE_BIN),
    # `bench attention --dtype bf16` alternated over GPT_AB_ROUNDS rounds
    # (default 2), beside PyTorch's default dense SDPA once -> attention_ab.md
    # (each block-sparse row over its dense peer, both builds). Then, unless
    # GPT_AB_PROFILE=0, Nsight Compute's warp states and throughputs of the
    # kernels GPT_ATTENTION_KERNELS names (a regex over demangled names;
    # default the head-size-128 forward and dk/dv, every layout) in each
    # build -> ncu_attention_{base,this}.csv (bundled); and where those
    # warps wait, instruction by instruction: the source counters (warp-stall
    # samples by SASS instruction) of each kernel GPT_ATTENTION_SOURCE names
    # (space-separated regexes, default the head-size-128 forward and dk/dv),
    # one profile each, summed over its launches (ncu_source_stalls.py)
    # -> attention_stalls.md.
    ab_sides attention_ab
    PYTHONUNBUFFERED=1 timeout 150 python3 $PACK/torch_reference.py attention --dtype bf16 --sdpa-backend default \
      --json "$OUT/ab_att_torch.json" > "$OUT/ab_att_torch.log" 2>&1 || say "attention_ab: torch: exit $?"
    for r in $(seq 1 "${GPT_AB_ROUNDS:-2}"); do
      for side in base this; do
        timeout 120 $(ab_bench $side) attention --dtype bf16 --json "$OUT/ab_att_${side}_$r.json" > "$OUT/ab_att_${side}_$r.log" 2>&1 ||
          say "attention_ab: bench attention ($side, round $r): exit $?"
      done
    done
    python3 tools/device/ab_table.py "$OUT" > "$OUT/attention_ab.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/attention_ab.md"
    if [[ ${GPT_AB_PROFILE:-1} == 1 ]]; then
      # profile_attention SIDE REPORT REGEX NCU_ARGS...: one `bench attention`
      # pass of SIDE under Nsight Compute, the kernels REGEX matches (demangled
      # names) -> /tmp/REPORT.ncu-rep, its log $OUT/REPORT.log.
      profile_attention() {
        local side=$1 report=$2 regex=$3
        shift 3
        timeout 200 ncu --kernel-name-base demangled --kernel-name "regex:$regex" "$@" \
          --cache-control none --clock-control none -o "/tmp/$report" --force-overwrite \
          $(ab_bench $side) attention --dtype bf16 --reps 1 --warmup 0 --min-sample-ms 0 > "$OUT/$report.log" 2>&1 ||
          say "attention_ab: ncu $report: exit $?"
      }
      for side in base this; do
        profile_attention $side ncu_attention_$side \
          "${GPT_ATTENTION_KERNELS:-(forward_kernel|dkdv_kernel)<__nv_bfloat16,[^,>]*128}" \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
          --section Occupancy --metrics lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum
        ncu --import "/tmp/ncu_attention_$side.ncu-rep" --page details --csv > "$OUT/ncu_attention_$side.csv" 2>&1
      done
      stalls=()
      read -r -a source_kernels <<< "${GPT_ATTENTION_SOURCE:-forward_kernel<__nv_bfloat16,[^,>]*128 dkdv_kernel<__nv_bfloat16,[^,>]*128}"
      for kernel in "${source_kernels[@]}"; do
        name=${kernel%%<*}
        for side in base this; do
          profile_attention $side "ncu_source_${name}_$side" "$kernel" --section SourceCounters --import-source no
          # (--print-source is newer than some ncu; without it the page is SASS by default)
          ncu --import "/tmp/ncu_source_${name}_$side.ncu-rep" --page source --csv --print-source sass \
            > "$OUT/ncu_source_${name}_$side.csv" 2>&1 ||
            ncu --import "/tmp/ncu_source_${name}_$side.ncu-rep" --page source --csv \
              > "$OUT/ncu_source_${name}_$side.csv" 2>&1
          stalls+=("${name}_$side=$OUT/ncu_source_${name}_$side.csv")
        done
      done
      python3 tools/device/ncu_source_stalls.py "${stalls[@]}" > "$OUT/attention_stalls.md" 2>&1 ||
        say "attention_ab: ncu_source_stalls.py: exit $? (attention_stalls.md says why)"
    fi
    ;;
  mlp)
    # Issue 31's guard: the MLP-4096 step (bf16, dense and BSR 90 % 32x32)
    # beside PyTorch's eager dense step, which the transformer work must not cost.
    # 200 steps after 20 on both sides: 10 steps of a 1.4 ms step are 14 ms
    # of timing, and the ratio moved by 0.1 from call to call (H200: 1.92-1.98x
    # with 10 steps on 2026-12-01, 1.90x with 50 and 1.94-2.10x with 200 on
    # 2026-12-02).
    timeout 200 .devbin/bench train --device cuda --models mlp --formats dense,bsr --sparsity 0.9 --modes bf16 \
      --steps 200 --warmup 20 --json "$OUT/mlp_coppice.json" > "$OUT/bench_mlp.log" 2>&1 || say "bench train mlp: exit $?"
    PYTHONUNBUFFERED=1 timeout 200 python3 $PACK/torch_train.py --device cuda --models mlp --formats dense \
      --modes bf16 --steps 200 --warmup 20 --json "$OUT/mlp_torch.json" > "$OUT/torch_mlp.log" 2>&1 || say "torch mlp: exit $?"
    python3 $PACK/train_compare.py --coppice "$OUT/mlp_coppice.json" --torch "$OUT/mlp_torch.json" \
      > "$OUT/mlp_step.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/mlp_step.md"
    ;;
  bound)
    metrics=gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
    metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum
    metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
    logs=()
    for block in ${GPT_BOUND_BLOCKS:-32 64}; do
      product=bsr_wgmma_kernel sddmm=bsr_wgmma_sddmm_kernel
      [[ $block == 32 ]] && product=bsr_wgmma32_kernel sddmm=bsr_wgmma32_sddmm_kernel
      for shape in ${GPT_BOUND_SHAPES:-1024x4096}; do
        bsr=(.devbin/bench bsr --hidden ${shape%x*} --in ${shape#*x} --batch 16384 --dtype bf16 --block $block
          --sparsity 0.9)
        # Launches past the first few: the plain product's warm-up is over, its timed repetitions still run.
        for kernel in "$product 10 3" "$sddmm 5 2"; do
          read -r name skip count <<< "$kernel"
          log=$OUT/ncu_bound_${name}_$shape.csv
          timeout 150 ncu --csv --kernel-name "regex:^$name\$" --launch-skip $skip --launch-count $count \
            --metrics $metrics "${bsr[@]}" > "$log" 2>&1 || say "ncu $name at $shape: exit $?"
          logs+=("$log")
        done
      done
    done
    python3 tools/device/ncu_bound.py "${logs[@]}" > "$OUT/bound.md" 2>&1
    tee -a "$SUMMARY" < "$OUT/bound.md"
    ;;
  breakdown)
    ncu_step() {  # NAME STEPS COMMAND...: ncu's per-kernel log of COMMAND (with its --steps STEPS)
      local name=$1 steps=$2
      shift 2
      timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
        --log-file "$OUT/ncu_${name}_$steps.csv" "$@" --steps "$steps" --warmup 1 > /dev/null 2>&1 ||
        say "ncu $name $steps: exit $?"
    }
    block=${GPT_BREAKDOWN_BLOCK:-32}
    for f in ${GPT_BREAKDOWN_FORMATS:-bsr dense}; do
      name=$f
      [[ $f == bsr ]] && name=bsr$block
      step=(.devbin/bench train --device cuda --models gpt --gelu "$GELU" --formats $f --sparsity 0.9 --block $block
        --modes bf16)
      # The routes a plain run measures, which the profiled runs then take: under
      # Nsight Compute the timed choices can come out otherwise (nm24 did, 2026-12-02).
      timeout 240 "${step[@]}" --steps 2 --warmup 1 --routes-out "/tmp/routes_coppice_$name.json" > /dev/null 2>&1 ||
        say "routes $name: exit $?"
      for n in 1 2; do
        ncu_step "coppice_$name" $n "${step[@]}" --routes-in "/tmp/routes_coppice_$name.json"
      done
      # The sparse products' launches apart too (by tile, direction and grid: which linear each was).
      python3 tools/device/kernel_breakdown.py "$OUT/ncu_coppice_${name}_1.csv" "$OUT/ncu_coppice_${name}_2.csv" \
        --launches 'product_kernel|sddmm_kernel|bsr_wgmma|nm24' > "$OUT/breakdown_coppice_$name.md" 2>&1
      say "== Coppice gpt $name (90 % where sparse), one bf16 step by kernel" &&
        tee -a "$SUMMARY" < "$OUT/breakdown_coppice_$name.md"
    done
    if [[ ${GPT_BREAKDOWN_TORCH:-1} == 1 ]]; then
      for n in 1 2; do
        ncu_step torch_dense $n python3 $PACK/torch_train.py --device cuda --models gpt --gelu "$GELU" --formats dense \
          --modes bf16
      done
      python3 tools/device/kernel_breakdown.py "$OUT/ncu_torch_dense_1.csv" "$OUT/ncu_torch_dense_2.csv" \
        > "$OUT/breakdown_torch_dense.md" 2>&1
      say "== PyTorch gpt dense, one bf16 step by kernel" && tee -a "$SUMMARY" < "$OUT/breakdown_torch_dense.md"
    fi
    gzip -f "$OUT"/ncu_*.csv
    ;;
  gaps)
    # Where the GPU idles in the step, and what the host was doing: bench
    # train traced by tools/device/cupti_trace.so (carry .devcupti: the .so
    # and libcupti, built as run_dp_timeline.sh says) for 40 steps of each
    # GPT_GAPS_FORMATS (default "bsr dense"; BSR at GPT_BREAKDOWN_BLOCK,
    # default 64), eager and from a CUDA graph, read by dp_timeline.py
    # --gaps: each kind of idle gap over 20 us, and the runtime API call the
    # host was in as it began -> gaps.md.
    [[ -f .devcupti/cupti_trace.so ]] || { say "gaps: carry .devcupti (cupti_trace.so and libcupti)"; exit 1; }
    block=${GPT_BREAKDOWN_BLOCK:-64}
    for f in ${GPT_GAPS_FORMATS:-bsr dense}; do
      for graph in "" --cuda-graph; do
        name=$f${graph:+_graph}
        rm -rf "/tmp/gaps_$name" && mkdir -p "/tmp/gaps_$name"
        CUDA_INJECTION64_PATH=$PWD/.devcupti/cupti_trace.so COPPICE_CUPTI_TRACE_DIR=/tmp/gaps_$name \
          LD_LIBRARY_PATH=$PWD/.devcupti:${LD_LIBRARY_PATH:-} timeout 200 .devbin/bench train --device cuda \
          --models gpt --gelu "$GELU" --formats "$f" --sparsity 0.9 --block "$block" --modes bf16 --steps 40 \
          --warmup 3 $graph > "$OUT/gaps_$name.log" 2>&1 || say "gaps $name: exit $?"
        python3 tools/device/dp_timeline.py "/tmp/gaps_$name" --skip 5 --label "$name" --gaps 12 >> "$OUT/gaps.md" 2>&1
      done
    done
    tee -a "$SUMMARY" < "$OUT/gaps.md"
    ;;
  kernels)
    [[ -f .devcupti/cupti_trace.so ]] || { say "kernels: carry .devcupti (cupti_trace.so and libcupti)"; exit 1; }
    (($# == 2)) || { say "kernels: name two jobs, got $#"; exit 1; }
    steps=${GPT_STEPS:-200}
    routes=("${GPT_KERNELS_ROUTES_A-${COPPICE_ROUTES:-}}" "${GPT_KERNELS_ROUTES_B-${COPPICE_ROUTES:-}}")
    for side in 0 1; do
      job=${*:$((side + 1)):1} run=kernels_$((side + 1))
      job_args "$job" "$run" "$steps" "evaluation.every_steps=$((steps * 10))"
      rm -rf "/tmp/$run" && mkdir -p "/tmp/$run"
      say "kernels, side $((side + 1)): $job, COPPICE_ROUTES=${routes[$side]}"
      COPPICE_ROUTES=${routes[$side]} CUDA_INJECTION64_PATH=$PWD/.devcupti/cupti_trace.so \
        COPPICE_CUPTI_TRACE_DIR=/tmp/$run LD_LIBRARY_PATH=$PWD/.devcupti:${LD_LIBRARY_PATH:-} timeout 300 \
        .devbin/trainer "${args[@]}" > "$OUT/$run.log" 2>&1 || say "kernels $job: exit $?"
      grep -E "^trained|^mask updates" "$OUT/$run.log" | tee -a "$SUMMARY"
    done
    python3 tools/device/trace_kernel_sums.py /tmp/kernels_1 /tmp/kernels_2 > "$OUT/kernels.md" 2>&1 ||
      say "trace_kernel_sums.py: exit $?"
    tee -a "$SUMMARY" < "$OUT/kernels.md"
    ;;
  train)
    for job in "$@"; do
      run=$job${GPT_TAG:-}
      job_args "$job" "$run" "${GPT_STEPS:-}"
      start=$(date +%s)
      timeout ${GPT_TIMEOUT:-560} .devbin/trainer "${args[@]}" > "$OUT/$run.log" 2> "$OUT/$run.progress" ||
        say "$run: exit $?"
      say "$run (${GPT_SETS:-as configured}): $(( $(date +%s) - start )) s"
      grep -E "^trained|^validation|^peak|^parameters|^mask updates" "$OUT/$run.log" | tee -a "$SUMMARY"
      cp runs/$run/metrics.jsonl "$OUT/$run.metrics.jsonl" 2>/dev/null
    done
    ;;
  eval)
    for job in "$@"; do eval_run "$job" "runs/$job"; done
    ;;
  moe)
    timeout 300 .devbin/bench train --device cuda --models gpt,gpt_moe --formats dense --modes bf16 --steps 10 \
      --warmup 3 --json "$OUT/moe_coppice.json" > "$OUT/bench_moe.log" 2>&1 || say "bench train gpt_moe: exit $?"
    PYTHONUNBUFFERED=1 timeout 300 python3 $PACK/torch_train.py --device cuda --models gpt,gpt_moe --formats dense \
      --modes bf16 --steps 10 --warmup 3 --json "$OUT/moe_torch.json" > "$OUT/torch_moe.log" 2>&1 ||
      say "torch gpt_moe: exit $?"
    python3 $PACK/train_compare.py --coppice "$OUT/moe_coppice.json" --torch "$OUT/moe_torch.json" \
      > "$OUT/moe_step.md" 2>&1
    # PyTorch's grouped GEMM where this PyTorch has it (an error row where not).
    PYTHONUNBUFFERED=1 timeout 200 python3 $PACK/torch_train.py --device cuda --models gpt_moe --formats dense \
      --modes bf16 --steps 10 --warmup 3 --moe-impl grouped --json "$OUT/moe_torch_grouped.json" \
      > "$OUT/torch_moe_grouped.log" 2>&1 || say "torch gpt_moe grouped: exit $?"
    grep -h "^torch train" "$OUT/torch_moe_grouped.log" | sed 's/gpt_moe/gpt_moe (grouped_mm)/' | tee -a "$SUMMARY"
    tee -a "$SUMMARY" < "$OUT/moe_step.md"
    grep -h "^train \|^torch train" "$OUT/bench_moe.log" "$OUT/torch_moe.log" | tee -a "$SUMMARY"
    ;;
  torch)
    mkdir -p /tmp/coppice_py && tar xzf .devbin_py/py.tgz -C /tmp/coppice_py || { say "no .devbin_py/py.tgz"; exit 2; }
    export LD_LIBRARY_PATH=/tmp/coppice_py/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONPATH=/tmp/coppice_py/site
    for t in test_dlpack_cuda test_torch; do
      timeout 300 python3 python/tests/$t.py > "$OUT/$t.log" 2>&1 || say "$t: exit $?"
      grep -E "FAILED|passed|skipped" "$OUT/$t.log" | tail -20 | tee -a "$SUMMARY"
    done
    PYTHONUNBUFFERED=1 timeout 400 python3 tools/bench/torch_train.py --device cuda --models gpt --formats dense,coppice_bsr \
      --modes bf16 --block "${GPT_TORCH_BLOCK:-64}" --sparsities "${GPT_TORCH_SPARSITIES:-0.9}" \
      --compile "${GPT_TORCH_COMPILE:-default,reduce-overhead}" ${GPT_TORCH_GRAPH:+--cuda-graph} \
      --steps 10 --warmup 3 --json "$OUT/torch_step.json" \
      > "$OUT/torch_step.log" 2>&1 || say "torch_train: exit $?"
    grep "torch train" "$OUT/torch_step.log" | tee "$OUT/torch_step.md" | tee -a "$SUMMARY"
    steps=${GPT_STEPS:-300}
    [[ ${GPT_TORCH_CURVES:-1} == 0 ]] && exit 0
    for pair in "gpt_dense:" "gpt_bsr_static_90:bsr:0.1:32"; do
      job=${pair%%:*} sparsify=${pair#*:}
      GPT_STEPS=$steps GPT_TAG=_curve "$0" train "$job" > /dev/null
      PYTHONUNBUFFERED=1 timeout 300 python3 tools/device/train_gpt_torch.py --corpus $CORPUS/_sources --steps "$steps" \
        --compile none ${sparsify:+--sparsify $sparsify} --metrics "$OUT/${job}_torch.metrics.jsonl" \
        > "$OUT/${job}_torch.log" 2>&1 || say "train_gpt_torch $job: exit $?"
      say "$job: PyTorch ${sparsify:+with coppice.torch $sparsify }$(tail -1 "$OUT/${job}_torch.log")"
      python3 - "$OUT/${job}_curve.metrics.jsonl" "$OUT/${job}_torch.metrics.jsonl" <<'PY' | tee -a "$OUT/torch_curves.md" "$SUMMARY"
import json, sys
def losses(path, key):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {r["step"]: r[key] for r in rows if r.get("kind") == "train" and key in r}
c, t = losses(sys.argv[1], "loss"), losses(sys.argv[2], "loss")
steps = sorted(set(c) & set(t))
print("| step | trainer loss | PyTorch loss | difference |\n|---:|---:|---:|---:|")
for s in steps:
    print(f"| {s} | {c[s]:.4f} | {t[s]:.4f} | {t[s] - c[s]:+.4f} |")
PY
    done
    ;;
  sweep)
    # tools/sweep run SWEEP (the trainer of the pack), then each finished
    # run's last checkpoint evaluated by PyTorch, and the frontier; the runs'
    # metrics and sweep_done.json files, frontier.jsonl and the png to $OUT
    # as one archive.
    sweep_file=${1:?run_gpt.sh sweep SWEEP.yaml}
    dir=runs/sweeps/$(basename "$sweep_file" .yaml)
    # GPT_SWEEP_DONE: a sweep_runs.tgz of an earlier call, whose finished runs
    # tools/sweep then skips (their checkpoints stayed on that machine).
    if [[ -n ${GPT_SWEEP_DONE:-} ]]; then mkdir -p "$dir" && tar xzf "$GPT_SWEEP_DONE" -C "$dir"; fi
    SWEEP_TRAINER=.devbin/trainer tools/sweep run "$sweep_file" --out "$dir" > "$OUT/sweep.log" 2>&1 || say "sweep: exit $?"
    tail -n 20 "$OUT/sweep.log" | tee -a "$SUMMARY"
    for run in "$dir"/runs/*/; do eval_run "$(basename "$run")" "${run%/}"; done
    tools/sweep frontier "$dir" 2>&1 | tail -n 20 | tee -a "$SUMMARY"
    (cd "$dir" && tar czf "$OUT/sweep_runs.tgz" $(ls frontier.jsonl frontier.png 2>/dev/null) runs/*/metrics.jsonl \
      runs/*/sweep_done.json)
    ;;
  *) say "unknown step '$what' (bench, attention, attention_ab, tests, step, blocks, mlp, ab, bound, breakdown, gaps, torch, moe, train JOB..., eval JOB..., sweep SWEEP.yaml)"; exit 2 ;;
esac
