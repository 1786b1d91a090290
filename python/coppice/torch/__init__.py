"""Coppice inside PyTorch: sparse layers, kernels and mask updates on torch modules.

    import torch, coppice.torch as ct
    model = torch.nn.Sequential(torch.nn.Linear(784, 300), torch.nn.ReLU(), torch.nn.Linear(300, 10))
    ct.sparsify_(model, [{"regex": r"0", "format": "csr"}], density=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    updater = ct.MaskUpdater(model, opt, method="rigl", end_step=6000, interval=100)
    # each step: updater.begin_step(t); forward, backward, opt.step(); updater.step(t)

Sparse weights become SparseLinear modules: their stored values are one
nn.Parameter (so any torch optimizer trains them, with state as compact as the
weight), their pattern buffers, and their products Coppice's kernels (BSR on
tensor cores, 2:4 on sparse tensor cores, CSR through cuSPARSE, and the CPU
kernels), reached through DLPack without copies. docs/guide/pytorch.md is the
guide. Needs PyTorch 1.13 or later (2.4 or later for torch.compile).
"""
try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("coppice.torch needs PyTorch (pip install torch, or Debian's python3-torch)") from e

from .functional import sparse_linear  # noqa: E402
from .mask_updates import GROWTH, GradualMagnitudePruning, MaskUpdater, adopt_pattern  # noqa: E402
from .modules import FORMATS, SparseLinear, keep_mask  # noqa: E402
from .policies import register_growth_policy, register_prune_criterion  # noqa: E402
from .sparsify import sparsify_  # noqa: E402
from .sr_ste import SrSteLinear  # noqa: E402

__all__ = ["FORMATS", "GROWTH", "GradualMagnitudePruning", "MaskUpdater", "SparseLinear", "adopt_pattern", "keep_mask",
           "register_growth_policy", "register_prune_criterion", "sparse_linear", "sparsify_", "SrSteLinear"]
