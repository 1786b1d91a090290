#!/usr/bin/env bash
# On the lent GPU, with .devbin unpacked (tools/device/build_devbin.sh; after run_gpu_suite.sh): the product
# planners' measured decisions in a bf16 block-RigL run's summary and checkpoint, and restored by a resumed run
# (sparse/route_choices.h). -> $OUT/route_check.txt
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=/tmp/route_check; rm -rf "$W"; mkdir -p "$W" "$OUT"; R=$OUT/route_check.txt
T=${TRAINER:-.devbin/trainer}
common=(--config "${SMOKE_CONFIG:-.devbin/gpu_smoke_bsr.yaml}" --set training.steps=200 --set mask_update.end_step=150
        --set checkpoint.dir="$W/ckpt" --set checkpoint.every_steps=50)
$T "${common[@]}" --max-steps 100 --set logging.metrics="$W/first.jsonl" > "$W/first.log" 2>&1
echo "first run (100 of 200 steps): exit $?" >> "$R"
$T "${common[@]}" --resume "$W/ckpt" --set logging.metrics="$W/second.jsonl" > "$W/second.log" 2>&1
echo "resumed run: exit $?" >> "$R"
python3 - "$W" >> "$R" 2>&1 <<'PY'
import json, sys, glob
w = sys.argv[1]
for name in ("first", "second"):
    recs = [json.loads(l) for l in open(f"{w}/{name}.jsonl")]
    s = [r for r in recs if r.get("kind") == "summary"]
    rc = s[-1].get("route_choices", []) if s else None
    print(f"{name}: summary {'present' if s else 'MISSING'}, {len(rc or [])} route choices")
    for c in rc or []:
        print(f"  {c['decision']} [{c['key']}] {c['candidates']} times_ns {c['times_ns']} -> {c['winner']} ({c['source']})")
import struct
ck = sorted(glob.glob(f"{w}/ckpt/*.safetensors"))
for p in ck[-1:]:
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]
    meta = json.loads(d[8:8 + n]).get("__metadata__", {})
    print("checkpoint", p.split("/")[-1], "trainer.extra.route_choices:", "present" if "trainer.extra.route_choices" in meta else "absent")
PY
tail -n 3 "$W/first.log" "$W/second.log" >> "$R"
cat "$R"
