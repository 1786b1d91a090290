#!/usr/bin/env bash
# The Python package's tests, as a user gets the package: tools/wheel's wheel
# installed offline into a fresh venv (numpy and pytest from Debian's
# packages), python/tests run there with pytest; then `tools/wheel --smoke`;
# then the install checks (install_check below): in a venv without system
# site packages, pip stops naming NumPy, and installs from the wheelhouse.
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
wheel=$(tools/wheel --wheelhouse "$work/dist" | tail -1) && [[ -f $wheel ]] || { echo "python: tools/wheel failed"; report 0 1; }
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
# install_check NAME COMMAND...: one counted test, its output in $work/NAME.log.
install_check() {
  local name=$1
  shift
  if "$@" >"$work/$name.log" 2>&1; then
    echo "python: $name: ok"
    passed=$((passed + 1))
  else
    echo "python: $name: FAILED ($work/$name.log):"
    tail -5 "$work/$name.log"
    failed=$((failed + 1))
  fi
}
# pip offline, whatever links or indexes this machine's pip configuration adds.
pip_offline() {
  env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null "$@" --no-index --disable-pip-version-check
}
# A venv without system site packages has no NumPy: pip stops, naming it and the range.
no_numpy() {
  rm -rf "$work/bare" && /usr/bin/python3 -m venv "$work/bare" || return 1
  local said
  said=$(pip_offline "$work/bare/bin/pip" install "$wheel" 2>&1) && return 1
  echo "$said"
  [[ $said == *"No matching distribution found for numpy<2,>=1.24"* ]]
}
install_check no_numpy no_numpy
# The same venv installs coppice and NumPy from the wheelhouse (tools/wheel --wheelhouse).
from_wheelhouse() {
  pip_offline "$work/bare/bin/pip" install --find-links "$(dirname "$wheel")" coppice &&
    (cd "$work" && bare/bin/python -c "
import numpy as np, coppice
a = np.arange(12, dtype=np.float32).reshape(3, 4)
t = coppice.tensor(a)
assert t.data_ptr() == a.ctypes.data and (t.to_format('csr').to_dense().numpy() == a).all()
print('coppice', coppice.__file__, 'numpy', np.__version__, np.__file__)")
}
install_check from_wheelhouse from_wheelhouse
report "$passed" "$failed"
