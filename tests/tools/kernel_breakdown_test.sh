#!/usr/bin/env bash
# tools/device/kernel_breakdown.py: one step's kernels from two Nsight Compute
# logs (one and two steps), by kernel and, with --launches, by template
# arguments and grid; logs it cannot read are refused, naming them.
set -u
script="${1:?usage: kernel_breakdown_test.sh path/to/kernel_breakdown.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/kernel_breakdown_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
header='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
row() {  # row ID KERNEL GRID UNIT VALUE
  echo "\"$1\",\"1\",\"bench\",\"h\",\"$2\",\"1\",\"7\",\"(128, 1, 1)\",\"$3\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"$4\",\"$5\""
}
product='void sparse_cuda::<unnamed>::product_kernel<__nv_bfloat16, sparse_cuda::<unnamed>::Tile<64, 2>, 1, 0>(sparse_cuda::Args<T1>, int)'
norm='void cuda::<unnamed>::norm_kernel<float>(const T1 *, long)'
# One step: a set-up launch, then the step (a product at two grids, a norm).
one() {
  echo '==PROF== Connected to process 1 (bench)'
  echo "$header"
  row 0 "$norm" "(8, 1, 1)" ns "5,000"
  row 1 "$product" "(64, 128, 1)" ns "200,000"
  row 2 "$product" "(16, 128, 1)" us "40"
  row 3 "$norm" "(8, 1, 1)" ns "50,000"
}
one >"$tmp/one.csv"
{ one; row 4 "$product" "(64, 128, 1)" ns "210,000"; row 5 "$product" "(16, 128, 1)" us "30"
  row 6 "$norm" "(8, 1, 1)" ns "60,000"; } >"$tmp/two.csv"

python3 "$script" "$tmp/one.csv" "$tmp/two.csv" >"$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "the product's step time is the second log's more (0.240 ms, 80 %)" \
  grep -qF '| `void sparse_cuda::::product_kernel` | 0.240 | 80.0 % |' "$tmp/out"
check "the norm's (0.060 ms)" grep -qF '| `void cuda::::norm_kernel` | 0.060 | 20.0 % |' "$tmp/out"
check "the total (0.300 ms)" grep -qF '| **all kernels of one step** | **0.300** | 100 % |' "$tmp/out"
check "no launch table unless asked" bash -c "! grep -q 'launches of' '$tmp/out'"

python3 "$script" "$tmp/one.csv" "$tmp/two.csv" --launches 'product_kernel' >"$tmp/out" 2>&1
check "--launches exits 0" [ $? -eq 0 ]
check "each grid a row, largest first, template arguments kept" \
  bash -c "grep -A3 'launches of' '$tmp/out' | tail -2 | head -1 | grep -qF '| \`product_kernel<__nv_bfloat16, Tile<64, 2>, 1, 0>\` | (64, 128, 1) | 1 | 0.210 | 70.0 % |'"
check "the other grid" grep -qF '| `product_kernel<__nv_bfloat16, Tile<64, 2>, 1, 0>` | (16, 128, 1) | 1 | 0.030 | 10.0 % |' "$tmp/out"
check "kernels not matching are left out of it" bash -c "! grep -q 'norm_kernel<' '$tmp/out'"

python3 "$script" "$tmp/one.csv" "$tmp/two.csv" --launches 'nothing_like_it' >"$tmp/out" 2>&1
check "a pattern matching nothing says so" grep -q 'no launch of a kernel matching' "$tmp/out"

python3 "$script" "$tmp/one.csv" "$tmp/missing.csv" >"$tmp/out" 2>&1
check "a missing log fails (exit 1)" [ $? -eq 1 ]
check "naming it" grep -q 'missing.csv: No such file' "$tmp/out"

echo "not a log" >"$tmp/bad.csv"
python3 "$script" "$tmp/bad.csv" "$tmp/two.csv" >"$tmp/out" 2>&1
check "a log without the metric fails (exit 1)" [ $? -eq 1 ]
check "naming it and the metric" grep -q 'bad.csv: no gpu__time_duration.sum rows' "$tmp/out"

{ echo "$header"; row 0 "$norm" "(8, 1, 1)" fortnights 1; } >"$tmp/unit.csv"
python3 "$script" "$tmp/unit.csv" "$tmp/two.csv" >"$tmp/out" 2>&1
check "an unknown time unit fails (exit 1), naming it" bash -c "[ $? -eq 1 ] && grep -q \"unknown time unit 'fortnights'\" '$tmp/out'"

python3 "$script" "$tmp/one.csv" "$tmp/two.csv" --launches '(' >"$tmp/out" 2>&1
check "a bad --launches pattern is a usage error (exit 2)" [ $? -eq 2 ]
check "naming the pattern" grep -q "'(' is not a regular expression" "$tmp/out"

python3 "$script" "$tmp/one.csv" "$tmp/one.csv" >"$tmp/out" 2>&1
check "two logs of the same steps fail (exit 1), saying so" \
  bash -c "[ $? -eq 1 ] && grep -q 'no kernel time differs' '$tmp/out'"

checks_done
