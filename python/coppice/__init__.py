"""Coppice from Python: sparse tensors, and sparse training jobs.

    import numpy as np, coppice
    t = coppice.tensor(np.ones((4, 4), np.float32))     # no copy: t.numpy() is the same memory
    s = t.to_format("csr")
    summary = coppice.train("configs/lenet300_rigl_90.yaml", max_steps=200,
                            callback=lambda step, loss: step < 100 or loss > 0.3)

A growth policy in Python, used from a job by name (mask_update.growth):

    def grow(layer, step, k, candidates, weight, gradient):
        return candidates[np.argsort(-np.abs(gradient.ravel()[candidates]))[:k]]
    coppice.register_growth_policy("my_rigl", grow)
"""
from ._coppice import (  # noqa: F401  (the module's whole API)
    Error,
    Tensor,
    formats,
    from_dlpack,
    growth_policies,
    matmul,
    register_growth_policy,
    sparse_from_mask,
    tensor,
    train,
)

__all__ = ["Error", "Tensor", "formats", "from_dlpack", "growth_policies", "matmul", "register_growth_policy",
           "sparse_from_mask", "tensor", "train"]
