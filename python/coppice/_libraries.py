"""Which CUDA libraries a CUDA build of coppice._coppice would find, for diagnostics.

The module needs none of CUDA's libraries to import or to run CPU work: it
links the CUDA runtime statically and finds cuBLAS, cuBLASLt, cuSPARSE and
NCCL by name the first time GPU work calls one (tensor/cuda/lazy/library.h),
looking, in order, in:

  1. $CUDA_HOME/lib64, $CUDA_PATH/lib64 (when set);
  2. the dynamic loader's own search: LD_LIBRARY_PATH, then ldconfig's cache;
  3. /usr/local/cuda/lib64, then /usr/local/cuda-*/lib64, newest name first.

($COPPICE_CUDA_LIBRARY_DIR, when set, replaces that search with its one
directory.) A library found nowhere fails only the GPU work that needs it,
with a coppice.Error naming it and those places. tools/wheel writes the
sonames the module looks for into coppice/_build.py (none in a CPU build;
the sources, without _build.py, name none either). cuda_libraries() looks
for them here the same way, without importing the module.
"""
import ctypes
import glob
import os

try:
    from ._build import CUDA_LIBRARIES
except ImportError:
    CUDA_LIBRARIES = ()


def _candidates(name):
    only = os.environ.get("COPPICE_CUDA_LIBRARY_DIR")
    if only:
        return [os.path.join(only, name)]
    first = [os.path.join(os.environ[v], "lib64", name) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    last = ["/usr/local/cuda/lib64"] + sorted(glob.glob("/usr/local/cuda-*/lib64"), reverse=True)
    return first + [name] + [os.path.join(d, name) for d in last]


def _find(name):
    error = "not found"
    for path in _candidates(name):
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path)  # loads it, as the module's first GPU call would
            return path, None
        except OSError as e:
            error = str(e)
    return None, error


def cuda_libraries():
    """{soname: where it loads from (a path, or the bare soname for the
    loader's own search), or None} for each CUDA library this build looks for
    at run time; {} for a CPU build. Loads each library it finds."""
    return {name: _find(name)[0] for name in CUDA_LIBRARIES}
