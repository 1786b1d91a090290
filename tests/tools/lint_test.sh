#!/usr/bin/env bash
# tools/lint with files named: one that is not a C++ or CUDA source, or that
# does not exist, stops it (exit 2, naming the file) before any file is
# touched, since clang-format would rewrite a Markdown page as C++; and so do
# files named beside --changed, which would otherwise be ignored.
set -u
lint="${1:?usage: lint_test.sh path/to/tools/lint}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
. "$(dirname "$0")/../util/check.sh"  # check, checks_done

printf '# A page\n\n`tools/test` runs every test.\n' >"$tmp/page.md"
printf 'int  f( ){return 1;}\n' >"$tmp/messy.cc"  # misformatted on purpose
cp "$tmp/page.md" "$tmp/page.md.orig"
cp "$tmp/messy.cc" "$tmp/messy.cc.orig"

"$lint" --format "$tmp/page.md" >"$tmp/out" 2>"$tmp/err"
check "a Markdown page: exit 2" [ $? -eq 2 ]
check "a Markdown page: named" grep -q "page.md: not a C++ or CUDA source" "$tmp/err"
check "a Markdown page: unchanged" cmp -s "$tmp/page.md" "$tmp/page.md.orig"

"$lint" --format "$tmp/messy.cc" "$tmp/page.md" >"$tmp/out" 2>"$tmp/err"
check "a source beside a page: exit 2" [ $? -eq 2 ]
check "a source beside a page: the source untouched" cmp -s "$tmp/messy.cc" "$tmp/messy.cc.orig"

"$lint" --check "$tmp/absent.cc" >"$tmp/out" 2>"$tmp/err"
check "a missing file: exit 2" [ $? -eq 2 ]
check "a missing file: named" grep -q "absent.cc: no such file" "$tmp/err"

"$lint" --format --changed "$tmp/messy.cc" >"$tmp/out" 2>"$tmp/err"
check "--changed beside a named file: exit 2" [ $? -eq 2 ]
check "--changed beside a named file: said" grep -q "exclude each other" "$tmp/err"
check "--changed beside a named file: the file untouched" cmp -s "$tmp/messy.cc" "$tmp/messy.cc.orig"

checks_done lint_test
