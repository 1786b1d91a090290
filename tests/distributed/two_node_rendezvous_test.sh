#!/usr/bin/env bash
# Two "nodes" on one machine: two network namespaces joined by a veth pair,
# each with its own address, and tools/launch run once in each
# (--nnodes 2 --node-rank R --master-addr <node 0's address>), two ranks a
# node, starting rendezvous_probe: all four ranks must meet at node 0's
# address and get rank 0's payload, with global ranks 0-3. Then the ways a
# multi-node launch goes wrong: a node with another job token (node 0
# refuses it, naming the peer; its ranks time out), and a master address
# that is loopback on node 0 while ranks run elsewhere (refused at once).
# The GPU version, with the trainer and NCCL, is tools/device/run_two_node.sh.
#
# Needs root and `ip netns` (iproute2); without them it says why and passes,
# checking nothing.
set -u
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
probe=$(absolute "${1:?usage: two_node_rendezvous_test.sh PROBE LAUNCH}")
launch=$(absolute "${2:?usage: two_node_rendezvous_test.sh PROBE LAUNCH}")
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done

ns0="coppice_n0_$$" ns1="coppice_n1_$$" v0="cpv0_$$" v1="cpv1_$$"
addr0=10.231.$(( $$ % 200 )).1 addr1=10.231.$(( $$ % 200 )).2
cleanup() { ip netns del "$ns0" 2>/dev/null; ip netns del "$ns1" 2>/dev/null; }
trap cleanup EXIT
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add "$ns0" 2>"$tmp/netns.err"; then
  echo "SKIP: two network namespaces need root and iproute2's ip netns ($(cat "$tmp/netns.err" 2>/dev/null))"
  exit 0
fi
ip netns add "$ns1" &&
  ip link add "$v0" type veth peer name "$v1" &&
  ip link set "$v0" netns "$ns0" && ip link set "$v1" netns "$ns1" &&
  ip -n "$ns0" addr add "$addr0/24" dev "$v0" && ip -n "$ns1" addr add "$addr1/24" dev "$v1" &&
  ip -n "$ns0" link set "$v0" up && ip -n "$ns1" link set "$v1" up &&
  ip -n "$ns0" link set lo up && ip -n "$ns1" link set lo up
check "two namespaces joined by a veth pair" [ $? -eq 0 ]
check "node 0's address is not node 1's" sh -c "! ip -n $ns1 addr show | grep -q ' $addr0/'"

# node R [ENV...]: tools/launch for node R of 2 inside its namespace, 2 ranks, into $tmp/nodeR.out/.err.
node() {
  local r=$1; shift
  local ns=$ns0; [ "$r" = 1 ] && ns=$ns1
  env "$@" ip netns exec "$ns" "$launch" -n 2 --nnodes 2 --node-rank "$r" --master-addr "$addr0" \
    --master-port 29621 -- "$probe" 8 >"$tmp/node$r.out" 2>"$tmp/node$r.err"
}

# 1. Four ranks over two nodes meet at node 0.
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
node 0 COPPICE_JOB_TOKEN="$token" & pid0=$!
node 1 COPPICE_JOB_TOKEN="$token"; rc1=$?
wait $pid0; rc0=$?
check "node 0's launch exits 0" [ "$rc0" -eq 0 ]
check "node 1's launch exits 0" [ "$rc1" -eq 0 ]
for k in 0 1 2 3; do
  out=$tmp/node$(( k / 2 )).out
  check "rank $k got rank 0's payload" \
    grep -qx "\[rank $k\] rank $k of 4 (local $(( k % 2 )) of 2): got \"hello from rank 0 at $addr0:29621\"" "$out"
done

# 2. Node 1 started with another job's token: node 0 refuses its ranks, naming
#    where they came from, and every rank fails within the timeout.
node 0 COPPICE_JOB_TOKEN="$token" & pid0=$!
node 1 COPPICE_JOB_TOKEN="another-job-token-0123456789"; rc1=$?
wait $pid0; rc0=$?
check "wrong token: node 0 fails" [ "$rc0" -ne 0 ]
check "wrong token: node 1 fails" [ "$rc1" -ne 0 ]
check "wrong token: node 0 names the stranger and why" grep -q "refused $addr1:[0-9]*: a wrong job token" "$tmp/node0.out"
check "wrong token: never quoted" [ "$(cat "$tmp"/node*.out "$tmp"/node*.err | grep -c another-job-token)" -eq 0 ]

# 3. A loopback master address while the launcher says ranks run elsewhere.
env COPPICE_JOB_TOKEN="$token" ip netns exec "$ns0" "$launch" -n 1 --nnodes 2 --node-rank 0 \
  --master-addr 127.0.0.1 --master-port 29622 -- "$probe" 8 >"$tmp/loop.out" 2>&1
check "loopback master: refused" [ $? -ne 0 ]
check "loopback master: says why" grep -q "loopback" "$tmp/loop.out"

checks_done
