#!/usr/bin/env bash
# Runs one libFuzzer binary for a while on a seed corpus (build_defs/fuzz.bzl):
#
#   run_fuzzer.sh FUZZER CORPUS SECONDS SCRATCH [libFuzzer flags...]
#
# The seed corpus is only read: new inputs go to SCRATCH/new and crashes,
# leaks, timeouts and out-of-memory inputs to SCRATCH/crashes/ (their paths
# are printed). SCRATCH "-" (the <name>_fuzz_test targets, i.e. the fuzz pass
# of tools/test) puts new inputs under $TEST_TMPDIR and findings under
# $TEST_UNDECLARED_OUTPUTS_DIR (<tools/fuzz --bazel info bazel-testlogs>/<target>/test.outputs/).
# COPPICE_FUZZ_SECONDS and COPPICE_FUZZ_SCRATCH override SECONDS and SCRATCH
# (tools/fuzz). Exit status: 0 when the time ran out without a finding.
set -uo pipefail

fuzzer=$1 corpus=$2 seconds=${COPPICE_FUZZ_SECONDS:-$3} scratch=${COPPICE_FUZZ_SCRATCH:-$4}
shift 4

if [[ "$scratch" == - ]]; then
  new="${TEST_TMPDIR:?}/new"
  crashes="${TEST_UNDECLARED_OUTPUTS_DIR:-$TEST_TMPDIR/crashes}"
else
  new="$scratch/new"
  crashes="$scratch/crashes"
  # Harnesses that write files (checkpoint) write them here, not in the
  # output base's _tmp/, which another bazel command there may clear while
  # a long run goes on.
  export TEST_TMPDIR="$scratch/tmp"
  mkdir -p "$TEST_TMPDIR"
fi
mkdir -p "$new" "$crashes"

# -timeout: an input that takes longer than this is a finding (unbounded work
# on hostile bytes); -rss_limit_mb: as is one that needs more memory. A fixed
# seed makes a CI run repeat the same search.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -seed="${COPPICE_FUZZ_SEED:-1}" \
  -print_final_stats=1 -artifact_prefix="$crashes/" "$@" "$new" "$corpus"
rc=$?

found=$(find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null)
if [[ -n "$found" ]]; then
  echo "run_fuzzer: findings (replay one with: $fuzzer FILE):"
  echo "$found" | sed 's/^/  /'
  if [[ "$scratch" == - ]]; then
    echo "run_fuzzer: a test keeps them in \$(tools/fuzz --bazel info bazel-testlogs)/<this target>/test.outputs/outputs.zip"
  fi
fi
if ((rc == 0)) && [[ -n "$found" ]]; then rc=1; fi
echo "run_fuzzer: new inputs in $new ($(find "$new" -type f | wc -l) files); exit $rc"
exit $rc
