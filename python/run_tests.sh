#!/usr/bin/env bash
# The Python package's tests, as a user gets the package: tools/wheel's wheel
# installed offline into a fresh venv (numpy and pytest from Debian's
# packages), python/tests run there with pytest; then `tools/wheel --smoke`;
# then the install checks (install_check below): in a venv without system
# site packages, pip stops naming NumPy, and installs from the wheelhouse;
# the module has no RUNPATH; a CUDA build finds CUDA's libraries moved
# elsewhere through CUDA_HOME and says which are missing without them (in a
# mount namespace: unshare -m); and a CPython of the wheel's version that is
# not Debian's (pyenv's, where present) installs the wheel and runs
# python/smoke.py. Each says "skipped (why)" where it cannot run.
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
skip() { echo "python: $1: skipped ($2)"; }
installed=$(echo "$work"/bare/lib/python3*/site-packages/coppice)
# tools/wheel drops the module's RUNPATH (a CUDA build's was /usr/local/cuda/lib64).
no_runpath() {
  local d
  d=$(readelf -d "$installed"/_coppice*.so) || return 1
  echo "$d" | grep -E 'NEEDED.*(cu|nccl)|RUNPATH|RPATH'
  ! echo "$d" | grep -qE 'RUNPATH|RPATH'
}
install_check no_runpath no_runpath
# A CUDA build, in a mount namespace where CUDA's library directory is hidden
# and mounted elsewhere: the import stops, naming the libraries; with
# CUDA_HOME naming the other place it imports and runs.
cuda_elsewhere() {
  unshare -m --propagation private bash -c '
    set -e
    work=$1 real=$(realpath /usr/local/cuda/lib64)
    mkdir -p "$work/elsewhere/lib64" "$work/empty"
    mount --bind "$real" "$work/elsewhere/lib64"
    mount --bind "$work/empty" "$real"
    cd "$work"
    if env -u CUDA_HOME -u CUDA_PATH -u LD_LIBRARY_PATH bare/bin/python -c "import coppice" 2>hidden.err; then
      echo "imported with $real hidden"
      exit 1
    fi
    tail -1 hidden.err
    grep -q "not found: .*libcudart.so" hidden.err
    env -u CUDA_PATH -u LD_LIBRARY_PATH CUDA_HOME="$work/elsewhere" bare/bin/python -c "
import numpy as np, coppice
print(\"with CUDA_HOME=$work/elsewhere:\", coppice.tensor(np.ones((4, 4), np.float32)).to_format(\"csr\"))"
  ' _ "$work"
}
if ! grep -q '"lib' "$installed/_build.py"; then
  skip cuda_elsewhere "a CPU build: the module needs no CUDA library"
elif ! unshare -m true 2>/dev/null; then
  skip cuda_elsewhere "unshare -m is not permitted here (it needs root)"
else
  install_check cuda_elsewhere cuda_elsewhere
fi
# The wheel in a venv of a CPython of the wheel's version that is not Debian's
# (pyenv's, conda's, one under /usr/local or /opt), where there is one: coppice
# and NumPy from the wheelhouse, then python/smoke.py.
version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
looked=(/usr/local/bin/python"$version" /opt/*/bin/python"$version" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python"$version"
  "$HOME"/miniconda3/bin/python"$version" "$HOME"/anaconda3/bin/python"$version")
other_python=
for p in "${looked[@]}"; do
  if [[ -x $p && $(realpath "$p") != $(realpath /usr/bin/python"$version") ]]; then
    other_python=$p
    break
  fi
done
other_python() {
  rm -rf "$work/other" && "$other_python" -m venv "$work/other" &&
    pip_offline "$work/other/bin/pip" install --find-links "$(dirname "$wheel")" coppice &&
    cp python/smoke.py "$work/other_smoke.py" &&
    (cd "$work" && other/bin/python -c "import sys; print(sys.version)" &&
      other/bin/python other_smoke.py "$OLDPWD/configs/lenet300_rigl_90.yaml")
}
if [[ -n $other_python ]]; then
  echo "python: other_python: $other_python"
  install_check other_python other_python
else
  skip other_python "no CPython $version other than Debian's: looked for /usr/local/bin/python$version, /opt/*/bin/python$version, pyenv's versions/$version.*, ~/miniconda3 and ~/anaconda3"
fi
report "$passed" "$failed"
