#!/usr/bin/env bash
# Runs on the lent 2-GPU machine (nvidia-h200-x2) from the repo root, with
# .devq carried (tools/device/pack_gpt.sh: the trainer):
#
#   device run, kind nvidia-h200-x2, carry [".devq"], command tools/device/run_two_node.sh
#
# Issue 37's multi-node launch on one host: two network namespaces joined by
# a veth pair, each a "node" with its own address and its own GPU
# (CUDA_VISIBLE_DEVICES), tools/launch run once in each (--nnodes 2
# --node-rank R --master-addr <node 0's address>), the trainer data-parallel
# over NCCL on the two (tools/device/dp_smoke.yaml, 300 steps), NCCL's
# shared-memory and peer-to-peer transports off so that the ranks talk over
# the veth pair as over a network. Then the same job as one node of 2 ranks
# (tools/launch -n 2). Their per-step losses must be bit-identical.
# TWO_NODE_NPROC ranks a node (default 1; 2 on a 4-GPU machine, issue 38).
# $OUT gets summary.txt and the runs' logs.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
W=/tmp/two_node
rm -rf "$W" && mkdir -p "$W" "$OUT"
SUMMARY="$OUT/summary.txt"
say() { echo "$*" | tee -a "$SUMMARY"; }
if [[ ! -x .devbin/trainer ]] && [[ -f .devq/bins.tar.zst ]]; then
  mkdir -p .devbin && LD_LIBRARY_PATH=.devq/zstd .devq/zstd/zstd -q -d --long=31 -c .devq/bins.tar.zst |
    tar xf - -C .devbin --strip-components=1
fi
N=${TWO_NODE_NPROC:-1}
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say "== run_two_node.sh on $NGPU GPUs, $N a node, $(date -u +%FT%TZ)"
(( NGPU >= 2 * N )) || { say "needs $((2 * N)) GPUs"; exit 1; }
ns0=coppice_node0 ns1=coppice_node1 addr0=10.232.0.1 addr1=10.232.0.2
cleanup() { ip netns del $ns0 2>/dev/null; ip netns del $ns1 2>/dev/null; }
trap cleanup EXIT
cleanup
if ! { ip netns add $ns0 && ip netns add $ns1 && ip link add cpn0 type veth peer name cpn1 &&
       ip link set cpn0 netns $ns0 && ip link set cpn1 netns $ns1 &&
       ip -n $ns0 addr add $addr0/24 dev cpn0 && ip -n $ns1 addr add $addr1/24 dev cpn1 &&
       ip -n $ns0 link set cpn0 up && ip -n $ns1 link set cpn1 up &&
       ip -n $ns0 link set lo up && ip -n $ns1 link set lo up; } 2> "$W/netns.err"; then
  say "could not make two network namespaces (root and iproute2 needed): $(tr '\n' ' ' < "$W/netns.err")"
  exit 1
fi
say "two namespaces: $ns0 ($addr0) and $ns1 ($addr1), joined by a veth pair"
args=(--config tools/device/dp_smoke.yaml --set training.steps=300 --set logging.every_steps=1
      --set distributed.world_size=$((2 * N)) --set distributed.backend=nccl --set distributed.timeout_s=60)
export COPPICE_JOB_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')

# node R: node R's launch in its namespace with its GPUs.
node() {
  local r=$1 ns=$ns0 gpus
  [[ $r == 1 ]] && ns=$ns1
  gpus=$(seq -s, $((r * N)) $((r * N + N - 1)))
  ip netns exec $ns env CUDA_VISIBLE_DEVICES=$gpus NCCL_SOCKET_IFNAME=cpn NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 \
    timeout 300 python3 tools/launch -n $N --nnodes 2 --node-rank $r --master-addr $addr0 --master-port 29641 -- \
    .devbin/trainer "${args[@]}" --run-dir $W/two_node --set logging.metrics=$W/two_node/metrics.jsonl \
    --set checkpoint.dir=$W/two_node/ckpt_n$r > "$OUT/node$r.log" 2>&1
}
node 0 & pid0=$!
node 1; rc1=$?
wait $pid0; rc0=$?
say "two nodes: node 0 exit $rc0, node 1 exit $rc1"
grep -h "trained\|error" "$OUT/node0.log" "$OUT/node1.log" | head -6 | tee -a "$SUMMARY"

timeout 300 python3 tools/launch -n $((2 * N)) -- .devbin/trainer "${args[@]}" --run-dir $W/one_node \
  --set logging.metrics=$W/one_node/metrics.jsonl --set checkpoint.dir=$W/one_node/ckpt > "$OUT/one_node.log" 2>&1
say "one node of $((2 * N)) ranks: exit $?"
grep -h "trained\|error" "$OUT/one_node.log" | head -3 | tee -a "$SUMMARY"

python3 - $W/two_node/metrics.jsonl $W/one_node/metrics.jsonl <<'PY' | tee -a "$SUMMARY"
import json, sys
def losses(path):
    try:
        return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("kind") == "train"}
    except OSError as e:
        print(f"missing: {e}")
        return {}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(a) & set(b))
differ = [s for s in common if a[s] != b[s]]
print(f"losses compared over {len(common)} steps: {len(differ)} differ"
      + (f" (first at step {differ[0]}: {a[differ[0]]!r} vs {b[differ[0]]!r})" if differ else " (bit-identical)"))
PY
