"""SR-STE (Zhou et al. 2021) on torch modules: n:m weights trained from dense ones, on Coppice's n:m kernels.

    layer = coppice.torch.SrSteLinear.from_dense(linear, n=2, m=4, decay=2e-4, interval=1)

The layer keeps its dense weight W (an ordinary nn.Parameter: the optimizer
updates every position). Forward multiplies by W's n:m projection P, the n
largest |W| of every group of m along a row (coppice.nm_mask, the selection the
trainer's SR-STE uses), stored as an n:m tensor, so the product runs on
Coppice's n:m kernels (2:4 on Hopper's sparse tensor cores). The mask is
recomputed from W every `interval` training forwards and kept between.
Backward is straight-through: W gets dy^T x at every position as if P were
dense, plus the sparse-refined term decay * (1 - mask) * W (decay 0 is the
plain STE). x's gradient is the n:m product's. sparsify_ makes these layers
for rules with "sr_ste" (True, or a dict of decay and interval).
"""
import torch

import coppice

from ._exchange import to_coppice, to_torch
from ._patterns import pattern_tensor
from .functional import _autocast_dtype, _backward, _cast, _dense_weight_grad, _forward
from .modules import sparse_parts


class _SrSteLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, mask, pattern, decay, dtype):
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        x = _cast(x, dtype).contiguous()
        w = _cast(weight, dtype)
        values = w.masked_select(mask).view(w.shape[0], -1)  # row-major: each group's kept entries in order
        ctx.save_for_backward(x, values, weight, mask)
        ctx.pattern, ctx.decay = pattern, decay
        return _forward(x, values, bias, pattern, dtype)[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, values, weight, mask = ctx.saved_tensors
        needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
        x_dtype, _, bias_dtype = ctx.dtypes
        dx, _, db = _backward(dy, x, values, ctx.pattern, needs_x, False, needs_b, (x_dtype, None, bias_dtype))
        dw = None
        if needs_w:  # straight-through: the dense gradient, plus the sparse-refined term
            dw = _dense_weight_grad(_cast(dy, x.dtype), x, dy.shape[-1]).to(weight.dtype)
            if ctx.decay:
                dw = dw.add_(weight.detach() * ~mask, alpha=ctx.decay)
        return dx, dw, db, None, None, None, None


class SrSteLinear(torch.nn.Module):
    """nn.Linear trained n:m by SR-STE (see the module's documentation)."""

    def __init__(self, in_features, out_features, bias=True, *, n=2, m=4, decay=2e-4, interval=1,
                 transposable=False, device=None, dtype=None):
        super().__init__()
        self._adopt(torch.nn.Linear(in_features, out_features, bias, device=device, dtype=dtype), n, m, decay,
                    interval, transposable)

    @classmethod
    def from_dense(cls, linear, n=2, m=4, decay=2e-4, interval=1, transposable=False):
        """An SrSteLinear on linear's own weight and bias Parameters (shared, not copied)."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"SrSteLinear.from_dense: expected an nn.Linear, got {type(linear).__name__}")
        self = cls.__new__(cls)
        torch.nn.Module.__init__(self)
        self._adopt(linear, n, m, decay, interval, transposable)
        return self

    def _adopt(self, linear, n, m, decay, interval, transposable):
        if not (decay >= 0.0 and decay < float("inf")):
            raise ValueError(f"SrSteLinear: decay must be finite and >= 0, got {decay}")
        if int(interval) < 1:
            raise ValueError(f"SrSteLinear: interval must be >= 1, got {interval}")
        if linear.in_features % m:
            raise ValueError(f"SrSteLinear: in_features ({linear.in_features}) must be a multiple of m ({m})")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.n, self.m, self.decay, self.interval, self.transposable = int(n), int(m), float(decay), int(interval), \
            bool(transposable)
        self.weight, self.bias = linear.weight, linear.bias
        self._forwards = 0
        self.register_buffer("mask", torch.zeros(self.weight.shape, dtype=torch.bool, device=self.weight.device))
        self.register_buffer("indices", torch.zeros(0, dtype=torch.int64, device=self.weight.device))
        self.refresh_mask()

    def refresh_mask(self):
        """Recomputes the mask (and the n:m pattern) from the current weight."""
        with torch.no_grad():
            keep = to_torch(coppice.nm_mask(to_coppice(self.weight.detach().float().contiguous()), self.n, self.m,
                                            self.transposable))
            self.mask = keep.to(self.weight.device)
            parts = sparse_parts(self.weight, self.mask, "nm", {"n": self.n, "m": self.m})
            self.indices = parts["indices"]

    def pattern(self):
        return pattern_tensor("nm", (self.out_features, self.in_features), {"n": self.n, "m": self.m},
                              {"indices": self.indices},
                              self.weight.detach().masked_select(self.mask).view(self.out_features, -1))

    def forward(self, x):
        if self.training:
            if self._forwards % self.interval == 0 and self._forwards > 0:
                self.refresh_mask()
            self._forwards += 1
        dtype = _autocast_dtype(x)
        return _SrSteLinear.apply(x, self.weight, self.bias, self.mask, self.pattern(), self.decay, dtype)

    # The count of training forwards decides when the mask is next recomputed, so a checkpoint keeps it: a
    # resumed loop recomputes on the same steps as an uninterrupted one.
    def get_extra_state(self):
        return {"forwards": self._forwards}

    def set_extra_state(self, state):
        if not isinstance(state, dict) or not isinstance(state.get("forwards"), int) or state["forwards"] < 0:
            raise RuntimeError(f"SrSteLinear.load_state_dict: the saved extra state is not an SrSteLinear's "
                               f"({state!r})")
        self._forwards = state["forwards"]

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"n={self.n}, m={self.m}, decay={self.decay}, interval={self.interval}")
