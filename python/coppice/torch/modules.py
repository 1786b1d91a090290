"""coppice.torch.SparseLinear: nn.Linear with a sparse weight run by Coppice's kernels.

The weight lives as its stored values, one nn.Parameter of the format's
values shape (BSR: [blocks, block_rows, block_cols]; CSR: [nnz]; n:m:
[out, in * n / m]), and its pattern as buffers named after the format's index
parts (BSR: crow_indices and col_indices). The optimizer sees only the
values, so its state is as compact as the weight. state_dict holds the
values, the bias, the index buffers and the format (extra state), and
torch.save / torch.load round-trip it; loading adopts the saved pattern,
whatever its number of stored entries, and refuses another format.
"""
import warnings

import torch

import coppice

from ._exchange import to_coppice, to_torch
from ._patterns import pattern_tensor
from . import functional
from .functional import sparse_linear

# Formats a SparseLinear takes, with the unit its selection ranks: an entry,
# a block (bsr), or n of each m along a row (nm).
FORMATS = ("bsr", "csr", "csc", "coo", "nm")


def _block_shape(block):
    if isinstance(block, int):
        return block, block
    rows, cols = block
    return int(rows), int(cols)


def format_attributes(format, block=64, n=2, m=4):
    """sparse_from_parts' keywords for a format: the block shape of bsr, n and m of nm."""
    if format not in FORMATS:
        raise ValueError(f"coppice.torch: format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format == "bsr":
        rows, cols = _block_shape(block)
        return {"block_rows": rows, "block_cols": cols}
    if format == "nm":
        return {"n": int(n), "m": int(m)}
    return {}


def keep_mask(weight, format, density, attributes, criterion="magnitude", generator=None):
    """Which entries of `weight` [out, in] a sparse weight of `format` keeps, as
    a bool tensor: the top round(density * units) units by the sum of squares
    of their entries (criterion "magnitude") or by a random score ("random"),
    a unit being an entry, or a block for bsr; for nm, the n largest (or n
    random) of each group of m along a row, whatever density says."""
    if criterion not in ("magnitude", "random"):
        raise ValueError(f"coppice.torch: criterion must be 'magnitude' or 'random', got {criterion!r}")
    out_features, in_features = weight.shape
    w = weight.detach().float().cpu()

    def scores(shape, from_weight):
        if criterion == "random":
            return torch.rand(shape, generator=generator)
        return from_weight

    if format == "nm":
        n, m = attributes["n"], attributes["m"]
        if in_features % m:
            raise ValueError(f"coppice.torch: nm needs in_features ({in_features}) divisible by m ({m})")
        groups = scores((out_features, in_features // m, m), w.abs().reshape(out_features, -1, m))
        keep = torch.zeros(groups.shape, dtype=torch.bool)
        keep.scatter_(-1, groups.topk(n, dim=-1).indices, True)
        return keep.reshape(out_features, in_features)
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"coppice.torch: density must be in [0, 1], got {density}")
    rows, cols = (attributes["block_rows"], attributes["block_cols"]) if format == "bsr" else (1, 1)
    if out_features % rows or in_features % cols:
        raise ValueError(f"coppice.torch: a [{out_features}, {in_features}] weight is not a whole number of "
                         f"{rows}x{cols} blocks")
    units = w.pow(2).reshape(out_features // rows, rows, in_features // cols, cols).sum((1, 3))
    units = scores(units.shape, units).flatten()
    keep = torch.zeros(units.numel(), dtype=torch.bool)
    keep[units.topk(int(round(density * units.numel()))).indices] = True
    keep = keep.reshape(out_features // rows, in_features // cols)
    return keep.repeat_interleave(rows, 0).repeat_interleave(cols, 1)


def sparse_parts(weight, mask, format, attributes):
    """The parts of `weight` [out, in] stored at `mask` in `format`, as torch
    tensors on the weight's device (values in its dtype)."""
    w = weight.detach().to("cpu", torch.float32).contiguous()
    # Both through DLPack (the mask as uint8: PyTorch 1.13 exports no bool), not NumPy.
    t = coppice.sparse_from_mask(w, mask.to("cpu", torch.uint8).contiguous(), format, attributes.get("block_rows", 0),
                                 attributes.get("block_cols", 0), attributes.get("n", 0), attributes.get("m", 0))
    parts = {name: to_torch(p).clone() for name, p in coppice.kernels.owned_parts(t).items()}
    return {name: p.to(weight.device, weight.dtype if name == "values" else p.dtype) for name, p in parts.items()}


def _resize_parameter(param, data, *, by_mask_update=True):
    """param.data = data of another shape, with a fresh gradient accumulator. PyTorch's set_data keeps a leaf's
    accumulator unless the dtype or device changes, and the last step's graph (a `loss` still held while the
    next forward runs) keeps the old one alive, so the next backward would be checked against the old shape
    ("expected shape compatible with [old nnz]"). Passing through another dtype drops it. A mask update under
    torch.distributed also warns that DDP must be built again (a load, done before DDP is built, does not)."""
    param.data = data.to(torch.float64 if data.dtype != torch.float64 else torch.float32)
    param.data = data
    if by_mask_update and torch.distributed.is_available() and torch.distributed.is_initialized():
        warnings.warn("coppice.torch: a mask update changed the number of stored entries of a SparseLinear while "
                      "torch.distributed is initialized: a DistributedDataParallel built before the update still "
                      "expects the old sizes, and its next iteration fails (\"Expected to have finished reduction "
                      "in the prior iteration\"). Build it again after the update (docs/guide/pytorch.md, DDP)",
                      RuntimeWarning, stacklevel=3)


class SparseLinear(torch.nn.Module):
    """y = x W^T + b with W sparse (format bsr, csr, csc, coo or nm), on
    Coppice's kernels: BSR on tensor cores, 2:4 (nm, n=2, m=4) on sparse tensor
    cores, CSR through cuSPARSE; the CPU runs Coppice's CPU kernels.

    SparseLinear(in_features, out_features) keeps `density` of a freshly
    initialized nn.Linear's weight at random positions (RigL's start);
    SparseLinear.from_dense(linear, ...) keeps the largest."""

    def __init__(self, in_features, out_features, bias=True, *, format="bsr", density=0.1, block=64, n=2, m=4,
                 criterion="random", generator=None, device=None, dtype=None):
        super().__init__()
        dense = torch.nn.Linear(in_features, out_features, bias, device=device, dtype=dtype)
        self._adopt(dense, format, density, format_attributes(format, block, n, m), criterion, generator)

    @classmethod
    def from_dense(cls, linear, format="bsr", density=0.1, block=64, n=2, m=4, criterion="magnitude",
                   generator=None):
        """A SparseLinear keeping `density` of linear's weight (the largest
        entries or blocks; for nm, n of each m), its bias as is, on linear's
        device and dtype."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"SparseLinear.from_dense: expected an nn.Linear, got {type(linear).__name__}")
        self = cls.__new__(cls)
        torch.nn.Module.__init__(self)
        self._adopt(linear, format, density, format_attributes(format, block, n, m), criterion, generator)
        return self

    def _adopt(self, linear, format, density, attributes, criterion, generator):
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.format, self.attributes = format, attributes
        mask = keep_mask(linear.weight, format, density, attributes, criterion, generator)
        parts = sparse_parts(linear.weight, mask, format, attributes)
        self.values = torch.nn.Parameter(parts.pop("values"))
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())
        self._index_names = sorted(parts)
        for name in self._index_names:
            self.register_buffer(name, parts[name])
        self._dense_grad_sink = None
        self._key = functional.layer_key(self)  # how the compiled op (torch.compile) finds this layer

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_pattern_memo", None)  # rebuilt on first use, from the copy's own buffers
        return state

    def __setstate__(self, state):
        # A copy (copy.deepcopy, pickle) is a layer of its own for the compiled op.
        super().__setstate__(state)
        self._key = functional.layer_key(self)

    # ---- the pattern ---------------------------------------------------------------------------------------

    @property
    def shape(self):
        return (self.out_features, self.in_features)

    def index_parts(self):
        """The pattern's parts: index part name -> buffer."""
        return {name: getattr(self, name) for name in self._index_names}

    def pattern(self):
        """The coppice.Tensor of this pattern (its values are not the weight's: use sparse_weight())."""
        # The layer's own fast path before the shared cache: the same buffer
        # objects at the same versions (what every step but a mask update sees).
        # The memo holds the buffers themselves, so a replaced one cannot pass
        # for its successor.
        buffers = [self._buffers[name] for name in self._index_names]
        versions = [b._version for b in buffers]
        memo = self.__dict__.get("_pattern_memo")
        if memo is not None and memo[1] == versions and all(a is b for a, b in zip(memo[0], buffers)):
            return memo[2]
        tensor = pattern_tensor(self.format, self.shape, self.attributes, self.index_parts(), self.values.detach())
        self.__dict__["_pattern_memo"] = (buffers, versions, tensor)
        return tensor

    def sparse_weight(self):
        """The weight as a coppice.Tensor on the values' memory (no copy)."""
        return coppice.kernels.with_values(self.pattern(), to_coppice(self.values))

    def set_pattern(self, weight):
        """Adopts a sparse coppice.Tensor [out, in] of this format (a mask
        update's result): its index parts become the buffers and its values are
        written into the same nn.Parameter (resized when the number of stored
        entries changed), so optimizers keep their reference; the values'
        gradient (of the old pattern) is cleared."""
        if weight.format != self.format or list(weight.shape) != list(self.shape):
            raise ValueError(f"SparseLinear.set_pattern: expected a {self.format} tensor of shape {list(self.shape)}, "
                             f"got {weight.format} {list(weight.shape)}")
        parts = {name: to_torch(p) for name, p in coppice.kernels.owned_parts(weight).items()}
        values = parts.pop("values").to(self.values.device, self.values.dtype)
        with torch.no_grad():
            if values.shape == self.values.shape:
                self.values.copy_(values)
            else:
                _resize_parameter(self.values, values.clone())
        self.values.grad = None  # a gradient of the old pattern
        for name in self._index_names:
            self._buffers[name] = parts[name].to(self.values.device)
        if self.__dict__.pop("_in_graph", False):
            warnings.warn("SparseLinear.set_pattern: this layer ran inside a CUDA graph capture (torch.cuda.graph, or "
                          "torch.compile's reduce-overhead mode); a graph keeps the pattern it captured, so its "
                          "replays would compute with the old one against the new values: capture again after a "
                          "mask update (under reduce-overhead, torch.compiler.reset() before the next step)",
                          RuntimeWarning, stacklevel=2)

    def _note_graph_capture(self):
        """Remembers that this layer's pattern went into a CUDA graph (set_pattern warns)."""
        self.__dict__["_in_graph"] = True

    @property
    def nnz(self):
        """Stored entries (a block format counts every entry of its blocks)."""
        return self.values.numel()

    @property
    def density(self):
        return self.nnz / (self.in_features * self.out_features)

    # ---- running it ----------------------------------------------------------------------------------------

    def forward(self, x):
        if functional.compiling():
            if self._dense_grad_sink is not None:
                raise RuntimeError("SparseLinear: a mask update's dense-gradient capture (RigL's update steps) "
                                   "cannot run inside torch.compile; run update steps on the eager module")
            return functional.layer_linear(x, self.values, self.bias, self._key)
        if self.values.is_cuda and torch.cuda.is_current_stream_capturing():
            self._note_graph_capture()
        return sparse_linear(x, self.values, self.pattern(), self.bias, dense_grad_sink=self._dense_grad_sink)

    def dense_weight(self):
        """The weight as a dense torch tensor [out, in] (a new tensor, no gradient)."""
        with torch.no_grad():
            return to_torch(self.sparse_weight().to_dense()).clone()

    def to_dense(self):
        """An nn.Linear with this weight made dense (the inverse of from_dense)."""
        linear = torch.nn.Linear(self.in_features, self.out_features, self.bias is not None,
                                 device=self.values.device, dtype=self.values.dtype)
        with torch.no_grad():
            linear.weight.copy_(self.dense_weight())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def extra_repr(self):
        attrs = "".join(f", {k}={v}" for k, v in self.attributes.items())
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"format={self.format}{attrs}, density={self.density:.4g}")

    # ---- state_dict ----------------------------------------------------------------------------------------

    def get_extra_state(self):
        return {"format": self.format, "shape": list(self.shape), "attributes": dict(self.attributes)}

    def set_extra_state(self, state):
        self._check_extra_state(state, "SparseLinear.load_state_dict")

    def _check_extra_state(self, state, who):
        if not isinstance(state, dict) or "format" not in state:
            raise RuntimeError(f"{who}: the saved extra state is not a SparseLinear's ({state!r})")
        saved = (state["format"], list(state.get("shape", [])), dict(state.get("attributes", {})))
        mine = (self.format, list(self.shape), dict(self.attributes))
        if saved != mine:
            raise RuntimeError(f"{who}: the checkpoint holds a {saved[0]} weight of shape {saved[1]} "
                               f"{saved[2]}, this layer a {mine[0]} weight of shape {mine[1]} {mine[2]}; "
                               "a format or shape change is not a load (build the layer to match)")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # The pattern is the checkpoint's: take its sizes before the copy, so
        # that a layer whose mask updates changed its number of stored entries
        # loads (the format and shape are checked first).
        extra = state_dict.get(prefix + "_extra_state")
        if extra is not None:
            self._check_extra_state(extra, "SparseLinear.load_state_dict")
        saved = state_dict.get(prefix + "values")
        if saved is not None and saved.shape != self.values.shape:
            _resize_parameter(self.values, self.values.new_empty(saved.shape), by_mask_update=False)
            self.values.grad = None  # a gradient of the pattern being replaced
        for name in self._index_names:
            saved = state_dict.get(prefix + name)
            own = self._buffers[name]
            if saved is not None and (saved.shape != own.shape or saved.dtype != own.dtype):
                self._buffers[name] = torch.empty(saved.shape, dtype=saved.dtype, device=own.device)
        before = len(error_msgs)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if len(error_msgs) == before and prefix + "values" in state_dict:
            try:  # the saved pattern checked now, not at the next forward
                self.pattern()
            except coppice.Error as e:
                error_msgs.append(f"{prefix}: the saved pattern is not a valid {self.format} weight: {e}")
