"""Sparse linear functions over torch tensors, run by Coppice's kernels.

    y = coppice.torch.sparse_linear(x, values, pattern, bias)

x [..., in] (a torch tensor on the CPU or a GPU), values: the weight's stored
values (values(pattern)'s shape; an nn.Parameter in SparseLinear), pattern: a
sparse coppice.Tensor [out, in] in any format (BSR runs Hopper's and Ampere's
tensor cores, n:m 2:4 the sparse tensor cores, CSR cuSPARSE) whose own values
are ignored. The gradient of `values` is compact: values' shape, the gradient
dy^T x sampled at the pattern (never a dense [out, in] matrix).

Tensors cross into Coppice and back through DLPack without copies. Under
torch.autocast the product runs in the autocast dtype and the gradients come
back in the master dtype (the casts are PyTorch's own ops, so autograd
converts the gradients). Where the installed PyTorch has torch.library's
custom ops (2.4 and later), torch.compile sees SparseLinear's product as one
opaque op (coppice::sparse_linear, and its backward) instead of tracing into it.
"""
import itertools
import weakref
from typing import Optional, Tuple

import torch

import coppice

from ._exchange import coppice_stream, to_coppice, to_torch
from ._patterns import pattern_tensor


def _autocast_dtype(device_type):
    """The dtype autocast runs products in on `device_type`, or None when it is off there."""
    if device_type == "cuda":
        if torch.is_autocast_enabled():
            return torch.get_autocast_gpu_dtype()
    elif device_type == "cpu":
        if torch.is_autocast_cpu_enabled():
            return torch.get_autocast_cpu_dtype()
    return None


def _dense_weight_grad(dy, x, out_features):
    """dy^T x as [out, in]: the dense gradient a growth policy ranks (RigL)."""
    return dy.reshape(-1, out_features).t().matmul(x.reshape(-1, x.shape[-1]))


def _bias_grad(dy):
    """The bias's gradient: dy summed over every leading dimension."""
    return dy.reshape(-1, dy.shape[-1]).sum(0)


def _forward(x, values, bias, pattern):
    with coppice_stream(x.device):
        weight = coppice.kernels.with_values(pattern, to_coppice(values))
        return to_torch(coppice.kernels.linear(to_coppice(x), weight, None if bias is None else to_coppice(bias)))


def _backward(dy, x, values, pattern, needs_x, needs_values):
    with coppice_stream(dy.device):
        weight = coppice.kernels.with_values(pattern, to_coppice(values))
        dx, dvalues = coppice.kernels.linear_backward(to_coppice(dy), to_coppice(x), weight, needs_x, needs_values)
    return to_torch(dx), to_torch(dvalues)


def _cast(t, dtype):
    return t if t is None or dtype is None or t.dtype == dtype else t.to(dtype)


class _SparseLinear(torch.autograd.Function):
    """y = x W^T + b with W = pattern's format and pattern at `values`, computed in `dtype` (autocast's; None:
    the operands' own). The casts happen inside, so autocast adds no autograd nodes: each gradient is cast back
    to its input's dtype."""

    @staticmethod
    def forward(ctx, x, values, bias, pattern, dense_grad_sink, dtype):
        ctx.dtypes = (x.dtype, values.dtype, None if bias is None else bias.dtype)
        x, values, bias = _cast(x, dtype).contiguous(), _cast(values, dtype), _cast(bias, dtype)
        _check(x, values, bias, pattern)
        ctx.pattern = pattern
        ctx.sink = dense_grad_sink
        ctx.save_for_backward(x, values)
        return _forward(x, values, bias, pattern)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values, needs_bias = ctx.needs_input_grad[:3]
        dy = _cast(dy, x.dtype).contiguous()
        dx, dvalues = _backward(dy, x, values, ctx.pattern, needs_x, needs_values)
        dbias = _bias_grad(dy) if needs_bias else None
        if ctx.sink is not None:
            ctx.sink(_dense_weight_grad(dy, x, dy.shape[-1]))
        x_dtype, values_dtype, bias_dtype = ctx.dtypes
        return _cast(dx, x_dtype), _cast(dvalues, values_dtype), _cast(dbias, bias_dtype), None, None, None


def _check(x, values, bias, pattern):
    if not isinstance(pattern, coppice.Tensor) or pattern.format == "dense":
        raise TypeError(f"sparse_linear: pattern must be a sparse coppice.Tensor, got {type(pattern).__name__}"
                        + (" (dense)" if isinstance(pattern, coppice.Tensor) else ""))
    if len(pattern.shape) != 2:
        raise ValueError(f"sparse_linear: pattern must be a matrix [out, in], got shape {list(pattern.shape)}")
    if x.dim() < 1 or x.shape[-1] != pattern.shape[1]:
        raise ValueError(f"sparse_linear: x of shape {list(x.shape)} does not end in the weight's "
                         f"{pattern.shape[1]} input features (weight {list(pattern.shape)})")
    if x.dtype != values.dtype or (bias is not None and bias.dtype != x.dtype):
        raise TypeError(f"sparse_linear: x is {x.dtype}, values {values.dtype}"
                        + ("" if bias is None else f", bias {bias.dtype}")
                        + " (cast them to one dtype, or run under torch.autocast)")
    if x.device != values.device or (bias is not None and bias.device != x.device):
        raise ValueError(f"sparse_linear: x is on {x.device}, values on {values.device}"
                         + ("" if bias is None else f", bias on {bias.device}"))


def _cast_for_autocast(x, values, bias):
    dtype = _autocast_dtype(x.device.type) if x.is_floating_point() else None
    return _cast(x, dtype), _cast(values, dtype), _cast(bias, dtype)


def sparse_linear(x, values, pattern, bias=None, *, dense_grad_sink=None):
    """x [..., in] times the sparse weight (pattern's format and pattern, these
    values) transposed, plus bias [out]. dense_grad_sink: a callable handed the
    dense gradient dy^T x [out, in] in the backward pass (what RigL's growth
    ranks; only where an updater asks for it). Eager only: under torch.compile
    use SparseLinear, whose pattern the compiled op finds by the layer."""
    if compiling():
        raise RuntimeError("sparse_linear: inside torch.compile, use coppice.torch.SparseLinear (the compiled op "
                           "reads the layer's pattern); the function takes a coppice.Tensor, which a graph cannot")
    dtype = _autocast_dtype(x.device.type) if x.is_floating_point() else None
    return _SparseLinear.apply(x, values, bias, pattern, dense_grad_sink, dtype)


# ---- torch.library: the opaque op torch.compile sees (PyTorch 2.4 and later) ----------------------------------
#
# A custom op's arguments are tensors and scalars, so the compiled op names
# its layer by an int key (layer_key: a SparseLinear registers itself) and
# looks the pattern up when it runs: a mask update between steps needs no
# recompilation. Inside the op everything is the eager path's code.

def compiling():
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling()


OPS = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
_layers = weakref.WeakValueDictionary()  # key -> the SparseLinear it names
_keys = itertools.count(1)


def layer_key(layer):
    """A process-wide key for `layer` (a SparseLinear), by which the compiled op finds its pattern."""
    key = next(_keys)
    _layers[key] = layer
    return key


def _pattern_of(key):
    return _layers[key].pattern()


def layer_linear(x, values, bias, key):
    """SparseLinear's product inside torch.compile: coppice::sparse_linear."""
    if not OPS:
        raise RuntimeError(f"coppice.torch: torch.compile needs torch.library.custom_op (PyTorch 2.4 or later); "
                           f"this is PyTorch {torch.__version__}")
    x, values, bias = _cast_for_autocast(x, values, bias)
    return torch.ops.coppice.sparse_linear(x, values, bias, key)


if OPS:
    @torch.library.custom_op("coppice::sparse_linear", mutates_args=())
    def _op_forward(x: torch.Tensor, values: torch.Tensor, bias: Optional[torch.Tensor], key: int) -> torch.Tensor:
        pattern = _pattern_of(key)
        x = x.contiguous()
        _check(x, values, bias, pattern)
        return _forward(x, values, bias, pattern)

    @_op_forward.register_fake
    def _(x, values, bias, key):
        return x.new_empty((*x.shape[:-1], _layers[key].out_features))

    @torch.library.custom_op("coppice::sparse_linear_backward", mutates_args=())
    def _op_backward(dy: torch.Tensor, x: torch.Tensor, values: torch.Tensor, key: int, needs_x: bool,
                     needs_values: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        dx, dvalues = _backward(dy.contiguous(), x.contiguous(), values, _pattern_of(key), needs_x, needs_values)
        # A custom op returns tensors: an empty one stands for "not asked".
        return (dx if dx is not None else x.new_empty(0), dvalues if dvalues is not None else values.new_empty(0))

    @_op_backward.register_fake
    def _(dy, x, values, key, needs_x, needs_values):
        return (torch.empty_like(x) if needs_x else x.new_empty(0),
                torch.empty_like(values) if needs_values else values.new_empty(0))

    def _setup_context(ctx, inputs, output):
        x, values, bias, key = inputs
        ctx.save_for_backward(x, values)
        ctx.key = key
        ctx.has_bias = bias is not None

    def _op_autograd(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dvalues = torch.ops.coppice.sparse_linear_backward(dy, x, values, ctx.key, needs_x, needs_values)
        dbias = _bias_grad(dy) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return (dx if needs_x else None, dvalues if needs_values else None, dbias, None)

    _op_forward.register_autograd(_op_autograd, setup_context=_setup_context)
