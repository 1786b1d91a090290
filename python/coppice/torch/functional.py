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
back in the master dtype (Coppice casts inside the one call each direction
makes; under torch.compile the casts are traced torch ops before the opaque
op, and autograd converts the gradients). Where the installed PyTorch has torch.library's
custom ops (2.4 and later), torch.compile sees SparseLinear's product as one
opaque op (coppice::sparse_linear, and its backward) instead of tracing into it.
"""
import itertools
import sys
import weakref
from typing import Optional, Tuple

import torch
from torch.utils import dlpack as _dlpack

import coppice

from ._exchange import coppice_stream, to_coppice, to_torch  # noqa: F401 (tests reach them here)


def _autocast_dtype(x):
    """The dtype autocast runs products of `x` in, or None: autocast off on x's device, or x not floating."""
    device_type = x.device.type
    if not x.is_floating_point():
        return None
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


# Coppice's names of the dtypes a linear computes in or returns gradients in.
_DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16"}


def _dtype_name(dtype):
    return None if dtype is None else _DTYPE_NAMES.get(dtype, str(dtype))


def _capsule(t):
    return None if t is None else _dlpack.to_dlpack(t.detach())


def _tensor(capsule):
    return None if capsule is None else _dlpack.from_dlpack(capsule)


# Each direction is one C++ call (coppice.kernels.sparse_linear_forward and
# _backward): the casts for autocast, the products and the bias gradient, on
# DLPack capsules. Every torch op or Python step here is paid 64 times a GPT
# step (32 layers, two directions): as separate casts and sums they kept the
# compiled step host-bound (docs/benchmarks.md, issue 34).

def _forward(x, values, bias, pattern, dtype=None):
    """(y, x as computed, values as computed): y = x W^T + b in dtype (None: the operands' own)."""
    with coppice_stream(x.device) as capture_stream:
        y, x_used, values_used = coppice.kernels.sparse_linear_forward(
            _capsule(x), _capsule(values), pattern, _capsule(bias), _dtype_name(dtype), capture_stream)
    return (_tensor(y), x if x_used is None else _tensor(x_used),
            values if values_used is None else _tensor(values_used))


def _backward(dy, x, values, pattern, needs_x, needs_values, needs_bias=False, dtypes=(None, None, None)):
    """(dx, dvalues, dbias), None where not asked, from x and values as _forward computed them; dtypes: those
    to return dx, dvalues and dbias in (None: the computed dtype)."""
    with coppice_stream(dy.device) as capture_stream:
        dx, dvalues, dbias = coppice.kernels.sparse_linear_backward(
            _capsule(dy), _capsule(x), _capsule(values), pattern, needs_x, needs_values, needs_bias,
            *(_dtype_name(d) for d in dtypes), capture_stream)
    return _tensor(dx), _tensor(dvalues), _tensor(dbias)


def _cast(t, dtype):
    return t if t is None or dtype is None or t.dtype == dtype else t.to(dtype)


class _SparseLinear(torch.autograd.Function):
    """y = x W^T + b with W = pattern's format and pattern at `values`, computed in `dtype` (autocast's; None:
    the operands' own). The casts happen inside, so autocast adds no autograd nodes: each gradient is cast back
    to its input's dtype."""

    @staticmethod
    def forward(ctx, x, values, bias, pattern, dense_grad_sink, dtype):
        _check(x, values, bias, pattern, dtype)
        ctx.dtypes = (x.dtype, values.dtype, None if bias is None else bias.dtype)
        ctx.pattern = pattern
        ctx.sink = dense_grad_sink
        y, x, values = _forward(x, values, bias, pattern, dtype)
        ctx.save_for_backward(x, values)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values, needs_bias = ctx.needs_input_grad[:3]
        dx, dvalues, dbias = _backward(dy, x, values, ctx.pattern, needs_x, needs_values, needs_bias, ctx.dtypes)
        if ctx.sink is not None:
            ctx.sink(_dense_weight_grad(_cast(dy, x.dtype), x, dy.shape[-1]))
        return dx, dvalues, dbias, None, None, None


def _check(x, values, bias, pattern, dtype=None):
    if not isinstance(pattern, coppice.Tensor) or pattern.format == "dense":
        raise TypeError(f"sparse_linear: pattern must be a sparse coppice.Tensor, got {type(pattern).__name__}"
                        + (" (dense)" if isinstance(pattern, coppice.Tensor) else ""))
    if len(pattern.shape) != 2:
        raise ValueError(f"sparse_linear: pattern must be a matrix [out, in], got shape {list(pattern.shape)}")
    if x.dim() < 1 or x.shape[-1] != pattern.shape[1]:
        raise ValueError(f"sparse_linear: x of shape {list(x.shape)} does not end in the weight's "
                         f"{pattern.shape[1]} input features (weight {list(pattern.shape)})")
    if dtype is None and (x.dtype != values.dtype or (bias is not None and bias.dtype != x.dtype)):
        raise TypeError(f"sparse_linear: x is {x.dtype}, values {values.dtype}"
                        + ("" if bias is None else f", bias {bias.dtype}")
                        + " (cast them to one dtype, or run under torch.autocast)")
    if x.device != values.device or (bias is not None and bias.device != x.device):
        raise ValueError(f"sparse_linear: x is on {x.device}, values on {values.device}"
                         + ("" if bias is None else f", bias on {bias.device}"))


def _cast_for_autocast(x, values, bias):
    dtype = _autocast_dtype(x)
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
    dtype = _autocast_dtype(x)
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


def _in_cudagraph_trees_warmup(device):
    """Whether torch.compile's CUDA graphs (cudagraph trees, the reduce-overhead mode) are warming a function up
    on `device`: its eager run whose new memory must come from the graphs' pool. Read from PyTorch's private
    state without creating any (a dictionary lookup where no tree exists); False where that state is not as
    PyTorch 2.x keeps it."""
    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    if trees is None:
        return False
    try:
        container = trees.get_obj(trees.local, "tree_manager_containers").get(device.index)
        manager = None if container is None else container.tree_manager
        return manager is not None and manager.path_state == trees.ExecutionState.WARMUP
    except Exception:  # noqa: BLE001 - another PyTorch's internals: not warming up as far as this can tell
        return False


def _in_graph_capture(t):
    """Whether t's CUDA work is going into a CUDA graph: PyTorch captures on the current stream, or cudagraph
    trees warm up (whose memory must come from the graphs' pool)."""
    return t.is_cuda and (torch.cuda.is_current_stream_capturing() or _in_cudagraph_trees_warmup(t.device))


def _owned_by_torch(t, in_graph):
    """t, or, when in_graph (_in_graph_capture), a copy in PyTorch's own memory. torch.compile's CUDA graphs
    (reduce-overhead) require every output of a captured graph in their own memory pool, and this op's result
    may be one (a tensor saved for the backward, a gradient), where Coppice's results are in Coppice's memory.
    The copy is a pass over the result, recorded in the graph."""
    return t.clone() if in_graph and t is not None else t


if OPS:
    @torch.library.custom_op("coppice::sparse_linear", mutates_args=())
    def _op_forward(x: torch.Tensor, values: torch.Tensor, bias: Optional[torch.Tensor], key: int) -> torch.Tensor:
        pattern = _pattern_of(key)
        _check(x, values, bias, pattern)
        in_graph = _in_graph_capture(x)
        if in_graph:
            _layers[key]._note_graph_capture()
        return _owned_by_torch(_forward(x, values, bias, pattern)[0], in_graph)

    @_op_forward.register_fake
    def _(x, values, bias, key):
        return x.new_empty((*x.shape[:-1], _layers[key].out_features))

    @torch.library.custom_op("coppice::sparse_linear_backward", mutates_args=())
    def _op_backward(dy: torch.Tensor, x: torch.Tensor, values: torch.Tensor, key: int, needs_x: bool,
                     needs_values: bool, needs_bias: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        in_graph = _in_graph_capture(dy)
        dx, dvalues, dbias = (_owned_by_torch(t, in_graph) for t in _backward(dy, x, values, _pattern_of(key),
                                                                             needs_x, needs_values, needs_bias))
        # A custom op returns tensors: an empty one stands for "not asked".
        return (dx if dx is not None else x.new_empty(0), dvalues if dvalues is not None else values.new_empty(0),
                dbias if dbias is not None else dy.new_empty(0))

    @_op_backward.register_fake
    def _(dy, x, values, key, needs_x, needs_values, needs_bias):
        return (torch.empty_like(x) if needs_x else x.new_empty(0),
                torch.empty_like(values) if needs_values else values.new_empty(0),
                dy.new_empty(dy.shape[-1]) if needs_bias else dy.new_empty(0))

    def _setup_context(ctx, inputs, output):
        x, values, bias, key = inputs
        ctx.save_for_backward(x, values)
        ctx.key = key
        ctx.has_bias = bias is not None

    def _op_autograd(ctx, dy):
        x, values = ctx.saved_tensors
        needs_x, needs_values = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        needs_bias = ctx.has_bias and ctx.needs_input_grad[2]
        dx, dvalues, dbias = torch.ops.coppice.sparse_linear_backward(dy, x, values, ctx.key, needs_x, needs_values,
                                                                      needs_bias)
        return (dx if needs_x else None, dvalues if needs_values else None, dbias if needs_bias else None, None)

    _op_forward.register_autograd(_op_autograd, setup_context=_setup_context)
