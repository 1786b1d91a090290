#!/usr/bin/env bash
# tools/launch: rank prefixes and environment, one failing rank ending the job
# with its status, a rank that ignores SIGTERM, SIGINT to the launcher, and
# the job token.
set -u
launch="${1:?usage: launch_test.sh path/to/tools/launch}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done

# 1. Three ranks: every line prefixed, the environment set.
"$launch" -n 3 --master-port 29511 -- sh -c \
  'echo hi $RANK; echo env $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT; echo to stderr $RANK >&2' \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "three ranks exit 0" [ "$rc" -eq 0 ]
for k in 0 1 2; do
  check "rank $k hi" grep -qx "\[rank $k\] hi $k" "$tmp/out"
  check "rank $k env" grep -qx "\[rank $k\] env 3 $k 3 127.0.0.1 29511" "$tmp/out"
  check "rank $k stderr" grep -qx "\[rank $k\] to stderr $k" "$tmp/out"
done
check "nine lines, all prefixed" [ "$(grep -c '^\[rank [0-2]\] ' "$tmp/out")" -eq 9 -a "$(wc -l <"$tmp/out")" -eq 9 ]

# 2. Rank 1 exits 3 while the others sleep 30: the launch ends quickly with status 3.
start=$(date +%s)
"$launch" -n 3 -- sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30' >"$tmp/out" 2>"$tmp/err"
rc=$?
took=$(( $(date +%s) - start ))
check "failing rank: status 3" [ "$rc" -eq 3 ]
check "failing rank: ends quickly (${took}s)" [ "$took" -lt 10 ]
check "failing rank: one line naming rank 1" \
  [ "$(grep -c 'rank 1 exited with status 3' "$tmp/err")" -eq 1 ]

# 3. A rank that ignores SIGTERM is killed after the grace period.
start=$(date +%s)
"$launch" -n 2 --grace 1 -- sh -c 'trap "" TERM; if [ "$RANK" = 0 ]; then exit 5; fi; sleep 30' \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
took=$(( $(date +%s) - start ))
check "SIGTERM ignored: status 5" [ "$rc" -eq 5 ]
check "SIGTERM ignored: killed after grace (${took}s)" [ "$took" -lt 10 ]

# 4. SIGINT to the launcher (Ctrl-C) stops every rank; status 130.
start=$(date +%s)
"$launch" -n 2 -- sh -c 'echo up $$; sleep 30' >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 50); do [ "$(grep -c up "$tmp/out")" -eq 2 ] && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
rc=$?
took=$(( $(date +%s) - start ))
check "SIGINT: status 130" [ "$rc" -eq 130 ]
check "SIGINT: ends quickly (${took}s)" [ "$took" -lt 10 ]
pids=$(sed -n 's/^\[rank [01]\] up //p' "$tmp/out")
check "SIGINT: both ranks started" [ "$(echo $pids | wc -w)" -eq 2 ]
alive=0
for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
check "SIGINT: no rank left" [ "$alive" -eq 0 ]

# 5. The job token: a fresh one per launch (32 hex digits), the same on every
#    rank, never printed by the launcher; the caller's own passed on as it is.
unset COPPICE_JOB_TOKEN
"$launch" -n 3 -- sh -c 'echo token $COPPICE_JOB_TOKEN' >"$tmp/out" 2>"$tmp/err"
check "token: three ranks exit 0" [ $? -eq 0 ]
tokens=$(sed -n 's/^\[rank [0-2]\] token //p' "$tmp/out" | sort -u)
check "token: one token shared by the three ranks" [ "$(echo "$tokens" | wc -l)" -eq 1 ]
check "token: 32 hex digits" sh -c "echo '$tokens' | grep -qxE '[0-9a-f]{32}'"
check "token: not printed by the launcher" [ ! -s "$tmp/err" ]
"$launch" -n 1 -- sh -c 'echo token $COPPICE_JOB_TOKEN' >"$tmp/out2" 2>/dev/null
check "token: another launch, another token" \
  [ "$(sed -n 's/^\[rank 0\] token //p' "$tmp/out2")" != "$tokens" ]
COPPICE_JOB_TOKEN=my-own-token-0123456789 "$launch" -n 2 -- sh -c 'echo token $COPPICE_JOB_TOKEN' >"$tmp/out" 2>&1
check "token: the caller's passed to rank 0" grep -qx '\[rank 0\] token my-own-token-0123456789' "$tmp/out"
check "token: the caller's passed to rank 1" grep -qx '\[rank 1\] token my-own-token-0123456789' "$tmp/out"

# 6. Usage errors.
"$launch" -n 0 -- true >/dev/null 2>&1
check "-n 0 refused" [ $? -ne 0 ]
"$launch" -n 2 true >/dev/null 2>&1
check "missing -- refused" [ $? -ne 0 ]

# 7. Several nodes: node 1 of 2 starts global ranks 2 and 3 with node 0's
#    address, the given port and the caller's token; what each node's launch
#    cannot choose alone is refused, naming it.
COPPICE_JOB_TOKEN=shared-token-0123456789 "$launch" -n 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.7 \
  --master-port 29512 -- sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $COPPICE_JOB_TOKEN' \
  >"$tmp/out" 2>"$tmp/err"
check "two nodes: node 1 exits 0" [ $? -eq 0 ]
check "two nodes: global rank 2" grep -qx '\[rank 2\] env 2 4 0 2 1 10.0.0.7 29512 shared-token-0123456789' "$tmp/out"
check "two nodes: global rank 3" grep -qx '\[rank 3\] env 3 4 1 2 1 10.0.0.7 29512 shared-token-0123456789' "$tmp/out"
COPPICE_JOB_TOKEN=shared-token-0123456789 "$launch" -n 1 --nnodes 2 --node-rank 2 --master-addr 10.0.0.7 \
  --master-port 29512 -- true >/dev/null 2>"$tmp/err"
check "two nodes: node rank 2 refused" [ $? -ne 0 ]
check "two nodes: node rank 2 named" grep -q 'node-rank 2 is not a node of --nnodes 2' "$tmp/err"
COPPICE_JOB_TOKEN=shared-token-0123456789 "$launch" -n 1 --nnodes 2 --master-port 29512 -- true >/dev/null 2>"$tmp/err"
check "two nodes: no master address refused" grep -q 'master-addr is needed with --nnodes 2' "$tmp/err"
COPPICE_JOB_TOKEN=shared-token-0123456789 "$launch" -n 1 --nnodes 2 --master-addr 10.0.0.7 -- true \
  >/dev/null 2>"$tmp/err"
check "two nodes: no port refused" grep -q 'master-port is needed with --nnodes 2' "$tmp/err"
(unset COPPICE_JOB_TOKEN; "$launch" -n 1 --nnodes 2 --master-addr 10.0.0.7 --master-port 29512 -- true \
  >/dev/null 2>"$tmp/err")
check "two nodes: no token refused" grep -q 'COPPICE_JOB_TOKEN is not set: with --nnodes 2' "$tmp/err"
"$launch" -n 1 --master-port 29513 -- sh -c 'echo env $GROUP_RANK $MASTER_ADDR' >"$tmp/out" 2>&1
check "one node: group rank 0, loopback" grep -qx '\[rank 0\] env 0 127.0.0.1' "$tmp/out"

checks_done
