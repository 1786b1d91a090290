"""The Coppice sparse tensor behind a sparse weight's index tensors, built once
per pattern.

A sparse weight lives in PyTorch as its values (an nn.Parameter) and its index
parts (buffers). Coppice's kernels want a coppice.Tensor of the format, which
coppice.sparse_from_parts builds after checking every index (and copying the
index parts, which it then trusts). That check is done once per pattern: the
tensor is cached against the index tensors' identity, data pointers and
version counters, so a mask update that writes the buffers in place, or
replaces them, is seen at the next call. The cache holds weak references to
the index tensors, so a dropped pattern frees its entry.
"""
import weakref

import coppice

from ._exchange import to_coppice

_cache = {}  # key -> _Entry


class _Entry:
    __slots__ = ("refs", "state", "tensor")

    def __init__(self, refs, state, tensor):
        self.refs, self.state, self.tensor = refs, state, tensor

    def alive(self):
        return all(r() is not None for r in self.refs)


def _state(indices):
    return tuple((t.data_ptr(), t._version, tuple(t.shape), t.dtype) for t in indices)


def pattern_tensor(format, shape, attributes, indices, values):
    """The coppice.Tensor of `format` and `shape` with these index parts (a dict
    of part name to torch tensor) and `values` (a torch tensor of the values'
    shape, used for the first build only: callers swap values in with
    coppice.kernels.with_values)."""
    names = sorted(indices)
    tensors = [indices[n] for n in names]
    key = (format, tuple(shape), tuple(sorted(attributes.items())), tuple(names), tuple(id(t) for t in tensors))
    state = _state(tensors)
    entry = _cache.get(key)
    if entry is not None and entry.state == state and all(r() is t for r, t in zip(entry.refs, tensors)):
        return entry.tensor
    parts = {n: to_coppice(indices[n]) for n in names}
    parts["values"] = to_coppice(values)
    tensor = coppice.sparse_from_parts(format, list(shape), parts, **attributes)
    for k in [k for k, e in _cache.items() if not e.alive()]:
        del _cache[k]
    _cache[key] = _Entry([weakref.ref(t) for t in tensors], state, tensor)
    return tensor
