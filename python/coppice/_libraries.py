"""Loads the CUDA libraries of a CUDA build of coppice._coppice before the module.

tools/wheel removes the module's RUNPATH (the build's /usr/local/cuda/lib64)
and writes the CUDA libraries it names (its NEEDED entries: libcudart,
libcublas, libcublasLt, libcusparse, libnccl) into coppice/_build.py. Each is
loaded here by that name from the first place that has it, so the module's
own NEEDED entries then resolve to the loaded copies wherever CUDA is:

  1. $CUDA_HOME/lib64, $CUDA_PATH/lib64 (when set);
  2. the dynamic loader's own search: LD_LIBRARY_PATH, then ldconfig's cache;
  3. /usr/local/cuda/lib64, then /usr/local/cuda-*/lib64, newest name first.

A library found nowhere stops the import with an ImportError that names it.
A CPU build (COPPICE_CUDA=0 tools/setup) names none, and the sources (no
_build.py) load nothing here.
"""
import ctypes
import glob
import os

try:
    from ._build import CUDA_LIBRARIES
except ImportError:
    CUDA_LIBRARIES = ()

_loaded = []  # the handles, kept for the life of the process


def _directories():
    dirs = [os.path.join(os.environ[v], "lib64") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return dirs, ["/usr/local/cuda/lib64"] + sorted(glob.glob("/usr/local/cuda-*/lib64"), reverse=True)


def _load(name, first, last):
    errors = []
    for path in [os.path.join(d, name) for d in first] + [name] + [os.path.join(d, name) for d in last]:
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            _loaded.append(ctypes.CDLL(path))
            return None
        except OSError as e:
            errors.append(str(e))
    return errors[-1] if errors else "not found"


def load():
    """Loads CUDA_LIBRARIES; raises ImportError naming those found nowhere."""
    if not CUDA_LIBRARIES:
        return
    first, last = _directories()
    missing = {}
    for name in CUDA_LIBRARIES:
        error = _load(name, first, last)
        if error is not None:
            missing[name] = error
    if missing:
        looked = first + ["LD_LIBRARY_PATH and ldconfig's cache", "/usr/local/cuda/lib64", "/usr/local/cuda-*/lib64"]
        raise ImportError(
            "coppice: this wheel is a CUDA build and needs the CUDA libraries "
            + ", ".join(CUDA_LIBRARIES)
            + " even on the CPU; not found: "
            + ", ".join(missing)
            + f" ({next(iter(missing.values()))}). Looked in: "
            + ", ".join(looked)
            + ". Install CUDA 13, or set CUDA_HOME (its lib64) or LD_LIBRARY_PATH to where its libraries are;"
            " or build a CPU wheel: COPPICE_CUDA=0 tools/setup && tools/wheel."
        )
