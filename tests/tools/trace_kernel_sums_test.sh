#!/usr/bin/env bash
# tools/device/trace_kernel_sums.py: two runs' CUPTI kernel records, ms a
# step by kernel side by side over the middle of each run, largest
# difference first; traces it cannot read are refused, naming them.
set -u
script="${1:?usage: trace_kernel_sums_test.sh path/to/trace_kernel_sums.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/trace_kernel_sums_test"
rm -rf "$tmp" && mkdir -p "$tmp/a" "$tmp/b"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
step='_Z14embedding_sumsv'                                # embedding_sums()
product='_ZN7coppice11sparse_cuda7productILi4EEEvi'      # void coppice::sparse_cuda::product<4>(int)
norm='_ZN7coppice4cuda12_GLOBAL__N_19norm_stepEv'         # coppice::cuda::(anonymous namespace)::norm_step()
# trace DIR PRODUCT_NS: 10 steps of 1 ms (t = 0 .. 10 ms), each a step
# kernel, a product of PRODUCT_NS and a norm of 50 us; a set-up kernel of
# 5 ms at t = 0 that the window (0.3 .. 0.9 of the span) leaves out; a
# runtime record that is not a kernel.
trace() {
  local i t
  {
    printf 'K\t0\t5000000\t0\t7\tsetup_kernel\n'
    printf 'R\t0\t100\t0\t1\tcudaMalloc\n'
    for i in $(seq 0 9); do
      t=$((i * 1000000 + 10))
      printf 'K\t%d\t%d\t0\t7\t%s\n' "$t" $((t + 10000)) "$step"
      printf 'K\t%d\t%d\t0\t7\t%s\n' $((t + 20000)) $((t + 20000 + $2)) "$product"
      printf 'K\t%d\t%d\t0\t7\t%s\n' $((t + 900000)) $((t + 950000)) "$norm"
    done
  } >"$1/trace.1.tsv"
}
trace "$tmp/a" 400000
trace "$tmp/b" 500000
gzip -c "$tmp/b/trace.1.tsv" >"$tmp/b.tsv.gz"

python3 "$script" "$tmp/a" "$tmp/b.tsv.gz" >"$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "steps counted in the window (6 of 10)" grep -qF '(6 steps in the window); B:' "$tmp/out"
check "the product first, demangled, its parameters cut: 0.4 -> 0.5 ms a step" \
  bash -c "sed -n 5p '$tmp/out' | grep -qF '| void sparse_cuda::product<4> | 0.400 (1.0) | 0.500 (1.0) | +0.100 |'"
check "anonymous namespaces cut" grep -qF '| cuda::norm_step | 0.050 (1.0) | 0.050 (1.0) | +0.000 |' "$tmp/out"
check "the set-up kernel outside the window left out" bash -c "! grep -q setup_kernel '$tmp/out'"
check "the totals" grep -qF '| all kernels | 0.460 | 0.560 | +0.100 |' "$tmp/out"

python3 "$script" "$tmp/a" "$tmp/b" --step-kernel nothing_like_it >"$tmp/out" 2>&1
check "a step kernel that never ran fails (exit 1)" [ $? -eq 1 ]
check "naming the trace and the pattern" grep -qF "no launch of --step-kernel 'nothing_like_it'" "$tmp/out"

python3 "$script" "$tmp/a" "$tmp/b" --window 0.9 0.3 >"$tmp/out" 2>&1
check "a window out of order fails (exit 1)" [ $? -eq 1 ]
check "saying what it needs" grep -qF -- '--window 0.9 0.3: need 0 <= LO < HI <= 1' "$tmp/out"

mkdir -p "$tmp/empty"
python3 "$script" "$tmp/empty" "$tmp/b" >"$tmp/out" 2>&1
check "a directory without traces fails (exit 1)" [ $? -eq 1 ]
check "naming it" grep -qF "$tmp/empty: no trace.*.tsv (was CUDA_INJECTION64_PATH set to cupti_trace.so?)" "$tmp/out"
python3 "$script" "$tmp/no_such_trace" "$tmp/b" >"$tmp/out" 2>&1
check "a path that does not exist fails (exit 1)" [ $? -eq 1 ]
check "naming it, not a traceback" grep -qF "$tmp/no_such_trace: no trace.*.tsv" "$tmp/out"
checks_done
