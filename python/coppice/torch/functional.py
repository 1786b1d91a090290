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
custom ops (2.4 and later), torch.compile sees the product as one opaque op
(coppice::sparse_linear) instead of tracing into it.
"""
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


def _forward(x, values, bias, pattern):
    with coppice_stream(x.device):
        weight = coppice.kernels.with_values(pattern, to_coppice(values))
        return to_torch(coppice.kernels.linear(to_coppice(x), weight, None if bias is None else to_coppice(bias)))


def _backward(dy, x, values, pattern, needs_x, needs_values):
    with coppice_stream(dy.device):
        weight = coppice.kernels.with_values(pattern, to_coppice(values))
        dx, dvalues = coppice.kernels.linear_backward(to_coppice(dy), to_coppice(x), weight, needs_x, needs_values)
    return to_torch(dx), to_torch(dvalues)


class _SparseLinear(torch.autograd.Function):
    """y = x W^T + b with W = pattern's format and pattern at `values`."""

    @staticmethod
    def forward(ctx, x, values, bias, pattern, dense_grad_sink):
        x = x.contiguous()
        ctx.pattern = pattern
        ctx.sink = dense_grad_sink
        ctx.save_for_backward(x, values)
        return _forward(x, values, bias, pattern)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values, needs_bias = ctx.needs_input_grad[:3]
        dy = dy.contiguous()
        dx, dvalues = _backward(dy, x, values, ctx.pattern, needs_x, needs_values)
        dbias = dy.reshape(-1, dy.shape[-1]).sum(0) if needs_bias else None
        if ctx.sink is not None:
            ctx.sink(_dense_weight_grad(dy, x, dy.shape[-1]))
        return dx, dvalues, dbias, None, None


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


def sparse_linear(x, values, pattern, bias=None, *, dense_grad_sink=None):
    """x [..., in] times the sparse weight (pattern's format and pattern, these
    values) transposed, plus bias [out]. dense_grad_sink: a callable handed the
    dense gradient dy^T x [out, in] in the backward pass (what RigL's growth
    ranks; only where an updater asks for it)."""
    cast = _autocast_dtype(x.device.type)
    if cast is not None and x.is_floating_point():
        x, values = x.to(cast), values.to(cast)
        bias = None if bias is None else bias.to(cast)
    _check(x, values, bias, pattern)
    if _compiling():
        if dense_grad_sink is not None:
            raise RuntimeError("sparse_linear: a dense-gradient sink (a mask update that ranks the dense gradient) "
                               "cannot run inside torch.compile; run update steps eagerly")
        return _custom_op_linear(x, values, bias, pattern)
    return _SparseLinear.apply(x, values, bias, pattern, dense_grad_sink)


# ---- torch.library: the opaque op torch.compile sees (PyTorch 2.4 and later) ----------------------------------

def _compiling():
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling()


_OPS = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
_library_patterns = {}  # pattern id -> pattern, for ops whose arguments can only be tensors and scalars


def _custom_op_linear(x, values, bias, pattern):
    if not _OPS:
        raise RuntimeError(f"sparse_linear: torch.compile needs torch.library.custom_op (PyTorch 2.4 or later); "
                           f"this is PyTorch {torch.__version__}")
    _library_patterns[id(pattern)] = pattern
    return torch.ops.coppice.sparse_linear(x, values, bias, id(pattern))


if _OPS:
    @torch.library.custom_op("coppice::sparse_linear", mutates_args=())
    def _op_forward(x: torch.Tensor, values: torch.Tensor, bias: torch.Tensor | None, pattern_id: int) -> torch.Tensor:
        return _forward(x.contiguous(), values, bias, _library_patterns[pattern_id])

    @_op_forward.register_fake
    def _(x, values, bias, pattern_id):
        return x.new_empty((*x.shape[:-1], _library_patterns[pattern_id].shape[0]))

    @torch.library.custom_op("coppice::sparse_linear_backward", mutates_args=())
    def _op_backward(dy: torch.Tensor, x: torch.Tensor, values: torch.Tensor, pattern_id: int,
                     needs_x: bool, needs_values: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dx, dvalues = _backward(dy.contiguous(), x.contiguous(), values, _library_patterns[pattern_id], needs_x,
                                needs_values)
        # A custom op returns tensors: an empty one stands for "not asked".
        return (dx if dx is not None else x.new_empty(0), dvalues if dvalues is not None else values.new_empty(0))

    @_op_backward.register_fake
    def _(dy, x, values, pattern_id, needs_x, needs_values):
        return (torch.empty_like(x) if needs_x else x.new_empty(0),
                torch.empty_like(values) if needs_values else values.new_empty(0))

    def _setup_context(ctx, inputs, output):
        x, values, bias, pattern_id = inputs
        ctx.save_for_backward(x, values)
        ctx.pattern_id = pattern_id
        ctx.has_bias = bias is not None

    def _op_autograd(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dvalues = torch.ops.coppice.sparse_linear_backward(dy, x, values, ctx.pattern_id, needs_x, needs_values)
        dbias = dy.reshape(-1, dy.shape[-1]).sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return (dx if needs_x else None, dvalues if needs_values else None, dbias, None)

    _op_forward.register_autograd(_op_autograd, setup_context=_setup_context)
