#!/usr/bin/env bash
# tools/kernel_resources --parse: a ptxas -v log (nvcc's stderr, as nvcc 13
# writes it) as a table of kernels by architecture, demangled and without
# namespaces or parameters: registers, spills, stack, static shared memory;
# --match; refusals that say what is wrong.
set -u
script="${1:?usage: kernel_resources_test.sh path/to/kernel_resources}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/kernel_resources_test"
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done

# Two kernels for sm_90 (one spilling at -maxrregcount=16), one for sm_90a.
cat > "$tmp/ptxas.log" <<'LOG'
ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Overriding maximum register limit 256 for '_ZN2ns5lightILi256EEEvPi' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2ns5lightILi256EEEvPi' for 'sm_90'
ptxas info    : Function properties for _ZN2ns5lightILi256EEEvPi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 4.380 ms
ptxas info    : Compiling entry function '_Z5heavyPfPKf' for 'sm_90'
ptxas info    : Function properties for _Z5heavyPfPKf
    352 bytes stack frame, 352 bytes spill stores, 388 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 352 bytes cumulative stack size
ptxas info    : Compile time = 19.502 ms
ptxas info    : Compiling entry function '_ZN2ns5lightILi256EEEvPi' for 'sm_90a'
ptxas info    : Function properties for _ZN2ns5lightILi256EEEvPi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem
LOG

"$script" --parse "$tmp/ptxas.log" > "$tmp/out" 2>&1
check "exits 0" [ $? -eq 0 ]
check "a template kernel demangled, its namespace and parameters dropped: 10 registers, 1 KB smem" \
  grep -qF '| `light<256>` | sm_90 | 10 | 0 / 0 | 0 | 1024 |' "$tmp/out"
check "the spilling kernel: 24 registers, 352 / 388 bytes spilled, a 352-byte stack" \
  grep -qF '| `heavy` | sm_90 | 24 | 352 / 388 | 352 | 0 |' "$tmp/out"
check "one row per architecture" grep -qF '| `light<256>` | sm_90a | 12 | 0 / 0 | 0 | 1024 |' "$tmp/out"

"$script" --parse "$tmp/ptxas.log" --match 'heavy' > "$tmp/match" 2>&1
check "--match keeps the kernels it matches" bash -c "grep -qF '| \`heavy\`' '$tmp/match' && ! grep -q light '$tmp/match'"
"$script" --parse "$tmp/ptxas.log" --match 'nothing_like_it' > "$tmp/none" 2>&1
check "--match matching nothing: exit 1, saying so, no empty table" \
  bash -c "[ $? -eq 1 ] && grep -qF \"no kernel's name matches 'nothing_like_it'\" '$tmp/none' && ! grep -q '|' '$tmp/none'"
echo "ptxas info    : 0 bytes gmem" > "$tmp/empty.log"
"$script" --parse "$tmp/empty.log" > "$tmp/empty" 2>&1
check "a log without kernels: exit 1, saying so" bash -c "[ $? -eq 1 ] && grep -qF 'no kernel' '$tmp/empty'"
"$script" --parse "$tmp/absent.log" > "$tmp/absent" 2>&1
check "a missing log: exit 1 naming it" bash -c "[ $? -eq 1 ] && grep -qF 'absent.log' '$tmp/absent'"
"$script" > /dev/null 2>&1
check "no arguments: usage, exit 2" [ $? -eq 2 ]
"$script" README.md > /dev/null 2>&1
check "a file that is not .cu: usage, exit 2" [ $? -eq 2 ]
checks_done kernel_resources_test
