#!/usr/bin/env bash
# A kernel per (op, format, device) cell (issue 33): no kernel chooses its
# behaviour by the format's Layout or by the op's name. Each format's kernel
# is registered in its own cell (the dispatcher, or sparse/format_cells.h for
# a route's launcher that takes several formats), so a new format or op adds
# cells and edits no kernel. This greps the kernel folders (tensor/cpu,
# tensor/cuda, sparse/cpu, sparse/cuda, sparse/attention/cpu and cuda; their
# :sources filegroups, passed as arguments) for
#   - Layout switches: switch on layout(), case Layout::, layout() == / !=;
#   - op-name comparisons: op (op_name, name) == / != a string literal;
# and fails naming file:line. Rejecting a format is done by reading its
# structure (impl_as, csr_impl, ...) or by registering no cell for it.
set -u

# Exemptions, each with its reason. A whole file ("*") stays exempt while it
# exists; a line exemption names a fixed string of the flagged line and must
# still match one, so that it is deleted when the line is fixed.
exempt_files=() exempt_what=() exempt_why=()
exempt() {  # exempt FILE WHAT WHY
  exempt_files+=("$1") exempt_what+=("$2") exempt_why+=("$3")
}
exempt sparse/cuda/spmm.cc '*' \
  "the SpMM planner: choosing a route by the operand's format is its job (docs/architecture.md, kernel routes)"
exempt sparse/cuda/sddmm.cc '*' \
  "the SDDMM planner: choosing a route by the pattern's format is its job (docs/architecture.md, kernel routes)"
# Format conversions (sparse/convert.cc, which switches on the source format
# by design) live outside these folders and need no exemption here.

layout_re='switch *\(.*layout\(\)|case +Layout::|layout\(\) *[!=]=|Layout::k[A-Za-z]+ *[!=]='
layout_re+='|[!=]= *[A-Za-z_][A-Za-z0-9_.>()-]*layout\(\)'  # either side of the comparison
opname_re='(^|[^A-Za-z0-9_.])(op|op_name|opname|name) *[!=]= *"|" *[!=]= *(op|op_name|opname|name)([^A-Za-z0-9_]|$)'
pattern="($layout_re)|($opname_re)"

# The flagged lines of stdin, comments left out: "N:text".
flagged() { grep -nE "$pattern" | grep -vE '^[0-9]+: *(//|\*)'; }

fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# The patterns themselves: each bad line must be caught, each good one not.
bad_lines=(
  'switch (a.layout()) {'
  '    case Layout::kCsr: return a;'
  '  if (s.layout() == Layout::kCoo) return {};'
  '  const bool ell = Layout::kBlockedEll == in.layout();'
  '  if (op == "gelu") return gelu(x);'
  '  if ("neg" != op_name) {'
)
good_lines=(
  '  COPPICE_CHECK(x.is_dense(), op, ": expected a dense operand");'
  '  register_cpu("sddmm", {{"dense", "dense", format_name(Layout::kCsr)}}, sddmm<CsrRowsWalk>);'
  '  if (reduction == "sum") result = sum(loss);'
  '  // switch (a.layout()) in a comment is not code'
  '  const std::string& coo = format_name(Layout::kCoo);'
)
for l in "${bad_lines[@]}"; do
  [[ -n $(printf '%s\n' "$l" | flagged) ]] || fail "the check misses: $l"
done
for l in "${good_lines[@]}"; do
  [[ -z $(printf '%s\n' "$l" | flagged) ]] || fail "the check flags: $l"
done

# The files, as repository paths (the arguments are runfiles paths).
(($# > 0)) || { echo "usage: kernel_cells_test.sh SOURCE..."; exit 2; }
files=()
for f in "$@"; do files+=("${f#./}"); done
for dir in tensor/cpu tensor/cuda sparse/cpu sparse/cuda sparse/attention/cpu sparse/attention/cuda; do
  n=$(printf '%s\n' "${files[@]}" | grep -c "^$dir/[^/]*$")
  ((n > 0)) || fail "no sources of $dir were given (its :sources filegroup)"
done

used=()
for f in "${files[@]}"; do
  while IFS= read -r hit; do
    [[ -n $hit ]] || continue
    line=${hit%%:*} text=${hit#*:}
    why=
    for i in "${!exempt_files[@]}"; do
      [[ ${exempt_files[$i]} == "$f" ]] || continue
      if [[ ${exempt_what[$i]} == '*' || $text == *"${exempt_what[$i]}"* ]]; then
        why=${exempt_why[$i]}
        used[$i]=1
      fi
    done
    if [[ -n $why ]]; then
      echo "exempt $f:$line ($why)"
    else
      fail "$f:$line chooses by format or op name inside a kernel (register a cell per format instead):$text"
    fi
  done < <(flagged <"$f")
done

for i in "${!exempt_files[@]}"; do
  f=${exempt_files[$i]}
  if ! printf '%s\n' "${files[@]}" | grep -qxF "$f"; then
    fail "exemption of $f: no such kernel source (delete the exemption)"
  elif [[ ${exempt_what[$i]} != '*' && -z ${used[$i]:-} ]]; then
    fail "exemption of $f for '${exempt_what[$i]}' matches no flagged line any more (delete the exemption)"
  fi
done

echo "${#files[@]} kernel sources checked, $fails failures"
((fails == 0))
