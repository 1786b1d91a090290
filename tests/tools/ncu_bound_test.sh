#!/usr/bin/env bash
# tools/device/ncu_bound.py: what bounds a kernel, one row a profiled launch
# of Nsight Compute's CSV (run_gpt.sh bound): the kernel's bare name, its
# duration in us, the L2's sectors as MB, DRAM bytes as MB in whatever unit
# ncu printed; logs it cannot read are refused, naming them.
set -u
script="${1:?usage: ncu_bound_test.sh path/to/ncu_bound.py}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/ncu_bound_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done
header='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
kernel='void coppice::sparse_cuda::(anonymous namespace)::bsr_wgmma32_kernel<__nv_bfloat16, false, (coppice::sparse_cuda::GeluWriteOut)0, false>(Maps, BsrProductArgs<T1>, long)'
row() {  # row ID METRIC UNIT VALUE
  echo "\"$1\",\"1\",\"bench\",\"h\",\"$kernel\",\"1\",\"7\",\"(160, 1, 1)\",\"(263, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"$2\",\"$3\",\"$4\""
}
{
  echo '==PROF== Connected to process 1 (bench)'
  echo "bench's own line"
  echo "$header"
  row 0 gpu__time_duration.sum usecond 113.90
  row 0 lts__throughput.avg.pct_of_peak_sustained_elapsed % 86.02
  row 0 lts__t_sectors_srcunit_tex_op_read.sum sector "15,309,375"
  row 0 dram__bytes_read.sum Mbyte 236.10
  row 0 dram__bytes_write.sum Gbyte 0.0298
  row 1 gpu__time_duration.sum nsecond "113,100"
} >"$tmp/log.csv"

python3 "$script" "$tmp/log.csv" >"$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "a row a launch, the bare kernel name, its figures in the columns' units" \
  grep -qF '| log.csv | bsr_wgmma32_kernel | 113.9 | 86.0 | 489.9 | 236.1 | 29.8 | - | - |' "$tmp/out"
check "the second launch, nanoseconds as us, its missing metrics as -" \
  grep -qF '| log.csv | bsr_wgmma32_kernel | 113.1 | - | - | - | - | - | - |' "$tmp/out"

{ echo "$header"; } >"$tmp/empty.csv"
python3 "$script" "$tmp/empty.csv" >"$tmp/out" 2>&1
check "a log without a profiled launch is a row saying so" grep -qF '| empty.csv | (no launch profiled) |' "$tmp/out"

python3 "$script" "$tmp/missing.csv" >"$tmp/out" 2>&1
check "a missing log fails (exit 1), naming it" bash -c "[ $? -eq 1 ] && grep -q 'missing.csv: No such file' '$tmp/out'"

{ echo "$header"; row 0 dram__bytes_read.sum fortnights 1; } >"$tmp/unit.csv"
python3 "$script" "$tmp/unit.csv" >"$tmp/out" 2>&1
check "an unknown unit fails (exit 1), naming the log, the metric and the unit" \
  bash -c "[ $? -eq 1 ] && grep -q \"unit.csv: dram__bytes_read.sum: cannot read '1' 'fortnights': unknown unit 'fortnights'\" '$tmp/out'"

python3 "$script" >"$tmp/out" 2>&1
check "no log is a usage error" bash -c "[ $? -ne 0 ] && grep -q 'ncu_bound.py LOG.csv' '$tmp/out'"
checks_done
