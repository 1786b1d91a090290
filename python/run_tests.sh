#!/usr/bin/env bash
# The Python package's tests, as a user gets the package: tools/wheel's wheel
# installed offline into a fresh venv (numpy and pytest from Debian's
# packages), python/tests run there with pytest; then `tools/wheel --smoke`;
# then the install checks (install_check below): in a venv without system
# site packages, pip stops naming NumPy, and installs from the wheelhouse;
# the module has no RUNPATH and needs no CUDA library at load; a CUDA build
# imports and runs CPU work with CUDA's libraries hidden, and finds them
# moved elsewhere through CUDA_HOME, and so does its trainer (in a mount
# namespace: unshare -m); and a CPython of the wheel's version that is not
# Debian's (pyenv's, where present) installs the wheel and runs
# python/smoke.py. Each says "skipped (why)" where it cannot run.
# Ends with "python: P passed, F failed"; exit 0 when all passed. tools/test
# runs it in its normal pass.
#
#   python/run_tests.sh [WORK_DIR]   (default: a fresh temporary directory,
#                                     removed when every check passed)
set -uo pipefail
cd "$(dirname "$0")/.."
own_work=0
if [[ -n ${1:-} ]]; then work=$1; else work=$(mktemp -d) && own_work=1; fi
mkdir -p "$work"
# A work directory of its own (the wheelhouse and several venvs) goes once
# every check passed; a failure keeps it, for pytest's log and the venvs.
report() {
  echo "python: $1 passed, $2 failed"
  if (($2 > 0)); then
    ((own_work)) && echo "python: logs kept in $work"
    exit 1
  fi
  ((own_work)) && rm -rf "$work"
  exit 0
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
# The module has no RUNPATH and names no CUDA library (a CUDA build finds
# them by name when GPU work needs them: tensor/cuda/lazy/library.h).
no_runpath() {
  local d
  d=$(readelf -d "$installed"/_coppice*.so) || return 1
  echo "$d" | grep -E 'NEEDED.*lib(cu|nccl|nv)|RUNPATH|RPATH'
  ! echo "$d" | grep -qE 'NEEDED.*lib(cu|nccl|nv)|RUNPATH|RPATH'
}
install_check no_runpath no_runpath
# hide_cuda WORK: in a mount namespace of its own (unshare -m), hides every
# CUDA library as a machine without CUDA lacks them: an empty directory over
# each /usr/local/cuda* toolkit, /dev/null over any other copy that ldconfig's
# cache names (Debian's libnccl2 in /usr/lib/x86_64-linux-gnu, say) and over
# the driver (libcuda.so.1), so that no GPU is seen either.
hide_cuda() {
  local d f
  mkdir -p "$1/empty"
  for d in /usr/local/cuda /usr/local/cuda-*; do
    if [[ -d $d && ! -L $d ]]; then mount --bind "$1/empty" "$d" || return 1; fi
  done
  for f in $(ldconfig -p | sed -nE 's/.*=> (.*lib(cudart|cublas|cublasLt|cusparse|nccl|cuda|nvJitLink)\.so[.0-9]*)$/\1/p'); do
    if [[ -e $f ]]; then mount --bind /dev/null "$f" || return 1; fi
  done
}
# in_namespace SCRIPT ARGS...: bash -c SCRIPT (ARGS as $1, ...; set -e) in a
# mount namespace of its own, where it may call hide_cuda.
in_namespace() {
  local script=$1
  shift
  unshare -m --propagation private bash -c "$(declare -f hide_cuda)
    set -e
    $script" _ "$@"
}
# A CUDA build with CUDA's libraries hidden: it imports, finds none of them,
# and runs CPU work (a sparse tensor, a training step); with CUDA_HOME naming
# the toolkit's library directory mounted elsewhere, it finds each there.
cuda_elsewhere() {
  local real
  real=$(realpath /usr/local/cuda/lib64) || return 1
  mkdir -p "$work/elsewhere/lib64"
  WORK=$work in_namespace '
    cd "$WORK"
    mount --bind "$1" "$WORK/elsewhere/lib64"  # the directory about to be hidden, seen from elsewhere
    hide_cuda "$WORK"
    env -u CUDA_HOME -u CUDA_PATH -u LD_LIBRARY_PATH bare/bin/python -c "
import numpy as np, coppice
from coppice import _libraries
found = _libraries.cuda_libraries()
print(\"with CUDA hidden:\", found)
assert found and all(p is None for p in found.values()), found
print(coppice.tensor(np.ones((4, 4), np.float32)).to_format(\"csr\"))
model = coppice.nn.Sequential(coppice.nn.Linear(8, 16), coppice.nn.ReLU(), coppice.nn.Linear(16, 4))
opt = coppice.optim.SGD(model.parameters(), lr=0.1)
x = coppice.tensor(np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32))
y = coppice.tensor(np.arange(32, dtype=np.int64) % 4)
loss = coppice.cross_entropy(model(x), y)
opt.zero_grad(); loss.backward(); opt.step()
print(\"a training step on the CPU: loss\", loss.item())"
    env -u CUDA_PATH -u LD_LIBRARY_PATH CUDA_HOME="$WORK/elsewhere" bare/bin/python -c "
from coppice import _libraries
found = _libraries.cuda_libraries()
print(\"with CUDA_HOME=$WORK/elsewhere:\", found)
assert found and all(p and p.startswith(\"$WORK/elsewhere/lib64/\") for p in found.values()), found"
  ' "$real"
}
# The trainer of a CUDA build (the default build, as tools/test's normal pass
# makes it) needs no CUDA library at load: with them hidden it trains a few
# steps of LeNet-300-100 on the CPU.
trainer_without_cuda() {
  bazel build //tools/trainer:trainer >/dev/null 2>&1 || bazel build //tools/trainer:trainer || return 1
  cp -f "$(bazel info bazel-bin 2>/dev/null)/tools/trainer/trainer" "$work/trainer" || return 1
  readelf -d "$work/trainer" | grep -E 'NEEDED|RUNPATH'
  rm -rf "$work/trainer_run"
  WORK=$work in_namespace '
    hide_cuda "$WORK"
    if ldd "$WORK/trainer" | grep -E "lib(cu|nccl|nv)"; then exit 1; fi
    if ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null; then exit 1; fi
    echo "CUDA hidden: $(ls /usr/local/cuda/ 2>/dev/null | wc -l) entries under /usr/local/cuda"
    "$WORK/trainer" --config "$1/configs/lenet300_rigl_90.yaml" --set device=cpu --max-steps 3 \
      --run-dir "$WORK/trainer_run" --set checkpoint.dir="$WORK/trainer_run/checkpoints" \
      --set logging.metrics="$WORK/trainer_run/metrics.jsonl"
  ' "$PWD"
}
if ! grep -q '"lib' "$installed/_build.py"; then
  skip cuda_elsewhere "a CPU build: the module looks for no CUDA library"
  skip trainer_without_cuda "a CPU build: the trainer looks for no CUDA library"
elif ! unshare -m true 2>/dev/null; then
  skip cuda_elsewhere "unshare -m is not permitted here (it needs root)"
  skip trainer_without_cuda "unshare -m is not permitted here (it needs root)"
else
  install_check cuda_elsewhere cuda_elsewhere
  install_check trainer_without_cuda trainer_without_cuda
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
