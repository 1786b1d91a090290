"""Growth policies and prune criteria written over torch tensors, for MaskUpdater(growth=..., prune=...).

    def grow(layer, step, k, candidates, weight, gradient):      # torch tensors (CPU), as coppice's NumPy ones
        return candidates[gradient.flatten()[candidates].abs().argsort(descending=True)[:k]]
    coppice.torch.register_growth_policy("my_rigl", grow)
    updater = coppice.torch.MaskUpdater(model, opt, growth="my_rigl", end_step=1000)

They are coppice.register_growth_policy and coppice.register_prune_criterion
with torch tensors in place of NumPy arrays: the same arguments, as CPU torch
tensors on the same memory (torch.from_numpy: no copy; read-only ones are
copied first, since PyTorch has no read-only tensors), and a torch tensor (or
anything NumPy takes) returned. The registered C++ policies and criteria are
named as they are (random, gradient, momentum; magnitude, movement).
"""
import numpy as np
import torch

import coppice


def _tensor(a):
    if a is None:
        return None
    a = np.asarray(a)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _array(r):
    return r.detach().cpu().numpy() if torch.is_tensor(r) else r


def register_growth_policy(name, fn):
    """fn(layer, step, k, candidates, weight, gradient) over torch tensors returns k of the candidates (flat
    positions, or block positions of a BSR layer), as coppice.register_growth_policy's NumPy form."""
    def over_numpy(layer, step, k, candidates, weight, gradient):
        return _array(fn(layer, step, k, _tensor(candidates), _tensor(weight), _tensor(gradient)))
    coppice.register_growth_policy(name, over_numpy)


def register_prune_criterion(name, fn):
    """fn(step, weight, values) over torch tensors returns a score per position of the weight or per stored
    value (the largest survive), as coppice.register_prune_criterion's NumPy form."""
    def over_numpy(step, weight, values):
        return _array(fn(step, _tensor(weight), _tensor(values)))
    coppice.register_prune_criterion(name, over_numpy)
