#!/usr/bin/env bash
# A stand-in for the trainer in tools/sweep's tests (SWEEP_TRAINER): takes the
# trainer's arguments and writes a metrics file of made-up, predictable
# records where logging.metrics says, in no time.
#
#   steps     --max-steps N, else 4; a train record every step, time_s 0.5 per
#             step (0.25 when a --set key starts with "sparsity", unless it is
#             sparsity={} or the run prunes gradually from every entry stored,
#             mask_update={"method": "gmp", ... "initial_density": 1.0 ...}), an eval
#             record every 2 steps, loss 3 - 0.1 * step (+ 0.05 when sparse)
#   summary   linear_flops_sparse 1000 (100 when sparse)
#   FAKE_TRAINER_LOG=FILE    appends the run directory's name, one line a run
#   FAKE_TRAINER_FAIL=NAME   the run NAME writes one record and exits 3
#   FAKE_TRAINER_PRUNE=NAME  the run NAME's density falls from 1 to 0.5 (gradual pruning)
set -euo pipefail
run_dir="" metrics="" steps=4 sparse=0 unpruned=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --run-dir) run_dir="$2"; shift 2 ;;
    --max-steps) steps="$2"; shift 2 ;;
    --set)
      case "$2" in
        logging.metrics=*) metrics="${2#logging.metrics=}" ;;
        'sparsity={}') ;;
        sparsity*) sparse=1 ;;
        mask_update=*'"gmp"'*'"initial_density": 1.0'*) unpruned=1 ;;
      esac
      shift 2 ;;
    *) shift ;;
  esac
done
name="$(basename "$run_dir")"
((unpruned)) && sparse=0
[[ -n "$metrics" ]] || { echo "fake trainer: no --set logging.metrics" >&2; exit 2; }
[[ -n "${FAKE_TRAINER_LOG:-}" ]] && echo "$name" >>"$FAKE_TRAINER_LOG"
echo "fake trainer: $name, $steps steps"
python3 - "$metrics" "$steps" "$sparse" "$name" <<'PY'
import json, os, sys
path, steps, sparse, name = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
fail = os.environ.get("FAKE_TRAINER_FAIL") == name
prune = os.environ.get("FAKE_TRAINER_PRUNE") == name
with open(path, "w") as f:
    for step in range(1, steps + 1):
        density = 1.0 if not prune else 1.0 - 0.5 * step / steps
        f.write(json.dumps({"kind": "train", "step": step, "loss": 3.0, "density": {"fc.weight": density},
                            "time_s": step * (0.25 if sparse else 0.5)}) + "\n")
        if fail:
            sys.exit(3)
        if step % 2 == 0:
            f.write(json.dumps({"kind": "eval", "split": "validation", "step": step,
                                "loss": 3.0 - 0.1 * step + (0.05 if sparse else 0.0)}) + "\n")
    f.write(json.dumps({"kind": "summary", "step": steps, "linear_flops_sparse": 100 if sparse else 1000,
                        "time_s": steps * 0.6}) + "\n")
PY
