#!/usr/bin/env bash
# Builds Coppice's package (tools/package), then each example against it with
# CMake, as a user outside this repository would, and runs it; then every
# ```cpp block of the user guide (docs/guide/*.md), compiled and run the same
# way. One line per program ("examples: NAME passed|failed"), then
# "examples: P passed, F failed"; exit 0 when all passed. tools/test runs it
# in its normal pass.
#
#   examples/run.sh [WORK_DIR]     (default: a fresh temporary directory,
#                                   removed when every program passed)
set -uo pipefail
cd "$(dirname "$0")/.."
own_work=0
if [[ -n ${1:-} ]]; then work=$1; else work=$(mktemp -d) && own_work=1; fi
mkdir -p "$work"
if ! tarball=$(tools/package "$work/dist" | tail -1) || [[ ! -f $tarball ]]; then
  echo "examples: tools/package failed"
  echo "examples: 0 passed, 1 failed"
  exit 1
fi
rm -rf "$work/prefix" && mkdir -p "$work/prefix" && tar xzf "$tarball" -C "$work/prefix"
prefix=$work/prefix/coppice
passed=0 failed=0
record() {  # NAME STATUS: one program's result; its log is $work/NAME.log
  if (($2 == 0)); then
    echo "examples: $1 passed"
    passed=$((passed + 1))
  else
    echo "examples: $1 failed (log: $work/$1.log)"
    tail -20 "$work/$1.log" 2>/dev/null
    failed=$((failed + 1))
  fi
}
run_example() {  # NAME ARGS...: configure, build and run examples/NAME
  local name=$1 build=$work/build/$1
  shift
  cmake -S "examples/$name" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    > "$work/$name.log" 2>&1 &&
    cmake --build "$build" -j 2 >> "$work/$name.log" 2>&1 &&
    "$build/$name" "$@" >> "$work/$name.log" 2>&1
  record "$name" $?
}
run_example custom_model
run_example custom_growth examples/custom_growth/job.yaml
run_example custom_sparsifier
# pkg-config finds the same library: one compile and link by hand.
pc_flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs coppice)
# shellcheck disable=SC2086
g++ -O1 examples/custom_model/main.cc $pc_flags -o "$work/custom_model_pc" > "$work/pkg_config.log" 2>&1 &&
  "$work/custom_model_pc" >> "$work/pkg_config.log" 2>&1
record pkg_config $?
# Every ```cpp block of the user guide (docs/guide/*.md) is a whole program:
# compiled against the package and run, each a test of its own.
for page in docs/guide/*.md; do
  n=0
  while IFS= read -r -d '' block; do
    n=$((n + 1))
    name=guide_$(basename "$page" .md)_$n
    printf '%s' "$block" > "$work/$name.cc"
    # shellcheck disable=SC2086
    g++ -O1 "$work/$name.cc" $pc_flags -o "$work/$name" > "$work/$name.log" 2>&1 && "$work/$name" >> "$work/$name.log" 2>&1
    record "$name" $?
  done < <(awk '/^```cpp$/ {on = 1; next} /^```$/ && on {on = 0; printf "%c", 0; next} on {print}' "$page")
done
echo "examples: $passed passed, $failed failed"
# A work directory of its own goes once everything passed: the package, the
# builds and the guide's programs take over a gigabyte, and every tools/test
# run left one in /tmp. A failure keeps it, for the logs named above.
if ((failed == 0)); then
  ((own_work)) && rm -rf "$work"
  exit 0
fi
exit 1
