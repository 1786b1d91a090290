#!/usr/bin/env bash
# The Python package's tests, as a user gets the package: tools/wheel's wheel
# installed offline into a fresh venv (numpy and pytest from Debian's
# packages), python/tests run there with pytest; then `tools/wheel --smoke`.
# Ends with "python: P passed, F failed"; exit 0 when all passed. tools/test
# runs it in its normal pass.
#
#   python/run_tests.sh [WORK_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d)}
mkdir -p "$work"
report() {
  echo "python: $1 passed, $2 failed"
  exit $(($2 > 0))
}
wheel=$(tools/wheel "$work/dist" | tail -1) && [[ -f $wheel ]] || { echo "python: tools/wheel failed"; report 0 1; }
rm -rf "$work/venv"
/usr/bin/python3 -m venv --system-site-packages "$work/venv" && "$work/venv/bin/pip" install --no-index --quiet "$wheel" ||
  { echo "python: the wheel does not install"; report 0 1; }
COPPICE_REPO=$PWD "$work/venv/bin/python" -m pytest -q -s -p no:cacheprovider python/tests \
  --junitxml="$work/pytest.xml" 2>&1 | tee "$work/pytest.log"
# pytest's JUnit report: passed and failed (errors count as failed).
read -r passed failed < <("$work/venv/bin/python" -c "
import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
s = r if r.tag == 'testsuite' else r[0]
bad = int(s.get('failures')) + int(s.get('errors'))
print(int(s.get('tests')) - bad - int(s.get('skipped')), bad)" "$work/pytest.xml" 2>/dev/null || echo "0 1")
# The wheel's smoke test, as docs/guide/python.md gives it: a fresh venv, LeNet-300-100 with RigL.
if tools/wheel --smoke "$work/smoke"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
report "$passed" "$failed"
