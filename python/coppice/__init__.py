"""Coppice from Python: sparse tensors, autograd, layers, optimizers and sparse training.

    import numpy as np, coppice
    t = coppice.tensor(np.ones((4, 4), np.float32))     # no copy: t.numpy() is the same memory
    s = t.to_format("csr")
    summary = coppice.train("configs/lenet300_rigl_90.yaml", max_steps=200,
                            callback=lambda step, loss: step < 100 or loss > 0.3)

A model written in Python, trained step by step:

    model = coppice.nn.Sequential(coppice.nn.Linear(32, 128), coppice.nn.ReLU(), coppice.nn.Linear(128, 4))
    opt = coppice.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss = coppice.cross_entropy(model(x), y)     # x: float32 [n, 32], y: int64 [n]
    opt.zero_grad(); loss.backward(); opt.step()

A growth policy in Python, used from a job by name (mask_update.growth):

    def grow(layer, step, k, candidates, weight, gradient):
        return candidates[np.argsort(-np.abs(gradient.ravel()[candidates]))[:k]]
    coppice.register_growth_policy("my_rigl", grow)
"""
import builtins as _builtins
import sys as _sys

# A CUDA build needs no CUDA library to import: it finds them by name when GPU
# work first needs one (_libraries.py says where; _libraries.cuda_libraries()
# reports which are found).
from ._coppice import *  # noqa: F401,F403  (the module's whole API)
from . import _coppice
from ._coppice import data, kernels, nn, optim

# `import coppice.nn`, `from coppice.optim import SGD` and `from coppice.data
# import DataLoader` find the module's submodules (coppice.torch is a
# package of its own, imported only when asked for: it needs PyTorch).
_sys.modules[__name__ + ".nn"] = nn
_sys.modules[__name__ + ".optim"] = optim
_sys.modules[__name__ + ".data"] = data
_sys.modules[__name__ + ".kernels"] = kernels


def _tensor_from_pickle(version, data):
    """What pickle calls to rebuild a coppice.Tensor (Tensor.__reduce__ names it)."""
    return _coppice._tensor_from_pickle(version, data)


# `from coppice import *` leaves Python's own sum, max, abs and pow alone (coppice.sum is still there).
__all__ = [name for name in dir() if not name.startswith("_") and not hasattr(_builtins, name)]
