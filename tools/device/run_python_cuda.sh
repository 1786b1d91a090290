#!/usr/bin/env bash
# Runs on the lent GPU machine from the repo root, with .devbin_py carried
# (tools/device/pack_python.sh makes it): the Python tests that need PyTorch
# on a GPU (python/tests/test_dlpack_cuda.py: a CUDA tensor into Coppice and
# back through DLPack without a copy). Its output goes to $OUT/python_cuda.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/coppice_py
tar xzf .devbin_py/py.tgz -C /tmp/coppice_py
{
  python3 -c "import sys, numpy, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__)"
  LD_LIBRARY_PATH=/tmp/coppice_py/libs PYTHONPATH=/tmp/coppice_py/site python3 python/tests/test_dlpack_cuda.py
  echo "exit $?"
} 2>&1 | tee "$OUT/python_cuda.txt"
