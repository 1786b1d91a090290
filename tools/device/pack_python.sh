#!/usr/bin/env bash
# Packs the Python module for the lent GPU machine, whose Python (3.12, with
# PyTorch and NumPy) is not Debian 12's (3.11): _coppice.so built against the
# given Python's headers (a CUDA build, Debian's shared system libraries), the
# package's Python files, and the shared libraries the module needs that such a
# machine lacks, into .devbin_py/py.tgz (ignored by git). Then:
#
#   device run, carry [".devbin_py"], command  tools/device/run_python_cuda.sh
#   device run, carry [".devq", ".devbin_py"], command  tools/device/run_gpt.sh torch
#
#   tools/device/pack_python.sh [PYTHON_INCLUDE_DIR]   (default: pyenv's 3.12.1 headers)
#
# The build overrides the python_headers repository for this one target, so
# the next tools/wheel recompiles the module's sources for Debian's Python.
set -euo pipefail
cd "$(dirname "$0")/../.."
include=${1:-/root/.pyenv/versions/3.12.1/include/python3.12}
[[ -f $include/Python.h ]] || { echo "pack_python: no Python.h in $include" >&2; exit 1; }
ver=$(sed -n 's/^#define PY_VERSION[[:space:]]*"\([0-9]*\)\.\([0-9]*\).*/\1\2/p' "$include/patchlevel.h")
[[ -n $ver ]] || { echo "pack_python: no PY_VERSION in $include/patchlevel.h" >&2; exit 1; }
repo=$(mktemp -d)
stage=$(mktemp -d)
trap 'rm -rf "$repo" "$stage"' EXIT
cp -r "$include/." "$repo/"
cp third_party/python_headers.BUILD "$repo/BUILD"
touch "$repo/WORKSPACE"
flags=(--define=system_libs=shared --override_repository=python_headers="$repo")
bazel build "${flags[@]}" //python:_coppice.so
so=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)/python/_coppice.so
mkdir -p "$stage/site/coppice" "$stage/libs"
# The package's Python files (coppice.torch included), as tools/wheel stages them.
(cd python && find coppice -name '*.py' -print0 | xargs -0 cp --parents -t "$stage/site")
cp "$so" "$stage/site/coppice/_coppice.cpython-$ver-x86_64-linux-gnu.so"
chmod u+w "$stage"/site/coppice/*.so
strip --strip-unneeded "$stage"/site/coppice/*.so
# Every library from Debian's /lib or /usr/lib but the C and C++ runtimes
# (the device has its own, and the CUDA ones come with its toolkit).
ldd "$so" | awk '$3 ~ /^\/(usr\/)?lib/ {print $3}' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' | xargs -I{} cp -L {} "$stage/libs/"
mkdir -p .devbin_py
tar czf .devbin_py/py.tgz -C "$stage" site libs
du -sh .devbin_py/py.tgz
