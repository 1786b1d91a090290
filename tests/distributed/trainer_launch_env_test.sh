#!/usr/bin/env bash
# The multi-process cases of the trainer (the sibling of
# tests/tools/trainer_bad_inputs.yaml for ranks started by a launcher): an
# nccl job whose ranks lack a valid job token or rendezvous setting stops with
# exit 1 and one line naming the variable, never quoting the token; ranks
# started by tools/launch get past the launch environment (on a machine
# without GPUs they then stop at the GPU check, with GPUs they train).
set -u
absolute() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
trainer=$(absolute "${1:?usage: trainer_launch_env_test.sh TRAINER LAUNCH}")
launch=$(absolute "${2:?usage: trainer_launch_env_test.sh TRAINER LAUNCH}")
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
cat >"$tmp/job.yaml" <<'YAML'
name: ranks2_nccl
device: auto
model: {name: mlp, options: {sizes: [8, 16, 4]}}
data:
  dataset: synthetic
  batch_size: 8
  synthetic: {examples: 64, test_examples: 16, features: 8, classes: 4}
optimizer: {name: sgd, lr: 0.1}
training: {steps: 2}
distributed: {world_size: 2, backend: nccl, timeout_s: 20}
logging: {progress: false}
YAML
unset COPPICE_JOB_TOKEN COPPICE_RENDEZVOUS_BIND RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

# rank0 CASE ENV...: rank 0 of 2 started by hand with ENV; sets rc and last (stderr's last line).
rank0() {
  local name=$1; shift
  (cd "$tmp" && env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 "$@" \
     timeout 60 "$trainer" --config job.yaml --run-dir "run_$name") >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  last=$(tail -n 1 "$tmp/$name.err")
}

rank0 no_token
check "no token: exit 1" [ "$rc" -eq 1 ]
check "no token: names the variable and how to set it ($last)" \
  grep -q 'COPPICE_JOB_TOKEN is not set.*openssl rand -hex 16' <<<"$last"

rank0 short_token COPPICE_JOB_TOKEN=pssst-secret
check "short token: exit 1" [ "$rc" -eq 1 ]
check "short token: names the variable ($last)" grep -q 'COPPICE_JOB_TOKEN has 12 characters, fewer than 16' <<<"$last"
check "short token: never quoted" [ "$(cat "$tmp/short_token.out" "$tmp/short_token.err" | grep -c pssst)" -eq 0 ]

rank0 bad_bind COPPICE_JOB_TOKEN=0123456789abcdef0123456789abcdef COPPICE_RENDEZVOUS_BIND=everywhere
check "bad bind: exit 1" [ "$rc" -eq 1 ]
check "bad bind: names the variable ($last)" grep -q "COPPICE_RENDEZVOUS_BIND='everywhere' is not 'addr'" <<<"$last"

# Through tools/launch: the token it makes is accepted by both ranks.
(cd "$tmp" && timeout 120 "$launch" -n 2 -- "$trainer" --config job.yaml --run-dir run_launch) \
  >"$tmp/launch.out" 2>"$tmp/launch.err"
rc=$?
check "tools/launch: no launch env error" [ "$(grep -c 'launch env' "$tmp/launch.out")" -eq 0 ]
if [ "$rc" -ne 0 ]; then
  check "tools/launch: stops only for want of GPUs ($(grep -m1 'error' "$tmp/launch.out"))" \
    grep -qE 'no CUDA GPU is visible|this build has no CUDA' "$tmp/launch.out"
else
  check "tools/launch: trained on GPUs" grep -q 'trained 2/2' "$tmp/launch.out"
fi

checks_done
