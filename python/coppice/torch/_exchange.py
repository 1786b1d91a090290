"""Torch tensors into Coppice and back through DLPack, without copies, and the
ordering of Coppice's stream with PyTorch's.

Coppice runs every kernel on a device's legacy default stream
(tensor/cuda/stream.h). PyTorch's default stream is that same stream, so
nothing needs ordering there; under `torch.cuda.stream(s)` the guard makes the
default stream wait for `s` before Coppice's work and `s` wait for it after.
While PyTorch captures a CUDA graph on its current stream (torch.cuda.graph,
torch.compile's reduce-overhead mode) the legacy stream may not be touched:
Coppice then records its work on the capturing stream itself, into the same
graph, with its memory held by that graph (tensor/backend.h,
run_in_foreign_capture).
"""
import contextlib

import torch
from torch.utils import dlpack as _dlpack

import coppice


# Both directions hand over bare DLPack capsules (torch.utils.dlpack.to_dlpack, and
# from_dlpack given a capsule): the __dlpack__ protocol's stream handshake costs
# tens of microseconds a call in PyTorch 2.x, and coppice_stream orders the
# streams here once for a whole call instead.


def to_coppice(t):
    """A coppice.Tensor on t's memory (t detached: DLPack refuses tensors that require grad). A bool tensor
    crosses as uint8 and is converted (a copy): PyTorch before 2.0 has no DLPack bool."""
    if t.dtype == torch.bool:
        return coppice.from_dlpack(_dlpack.to_dlpack(t.detach().to(torch.uint8))).to("bool")
    return coppice.from_dlpack(_dlpack.to_dlpack(t.detach()))


def to_torch(t):
    """A torch tensor on a coppice.Tensor's memory (dense), or None for None; bool as to_coppice says."""
    if t is None:
        return None
    if t.dtype == "bool":
        return _dlpack.from_dlpack(t.to("u8").__dlpack__()).bool()
    return _dlpack.from_dlpack(t.__dlpack__())


@contextlib.contextmanager
def coppice_stream(device):
    """Orders Coppice's stream (the device's default) with PyTorch's current one, both ways. Yields the stream
    handle to pass Coppice's calls as capture_stream: PyTorch's current stream while it captures a graph, else 0."""
    if device.type != "cuda":
        yield 0
        return
    current = torch.cuda.current_stream(device)
    if current.cuda_stream == 0:  # the legacy default stream: Coppice's own
        yield 0
        return
    if torch.cuda.is_current_stream_capturing():
        yield current.cuda_stream
        return
    default = torch.cuda.default_stream(device)
    default.wait_stream(current)
    try:
        yield 0
    finally:
        current.wait_stream(default)
