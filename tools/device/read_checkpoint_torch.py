#!/usr/bin/env python3
"""Reads a Coppice checkpoint with PyTorch alone (issue 6: checkpoints that
PyTorch can read): parses the safetensors header, loads every dense entry with
torch.frombuffer, rebuilds each sparse weight from its parts and the
coppice.format / coppice.shape metadata (sparse/io/sparse_safetensors.h), and
prints one line per tensor. A weight in a format declared by its levels
(docs/guide/levels.md; its declaration in the coppice.attr.<name>.levels
metadata) is rebuilt by walking its levels (levels_to_coo). Exits non-zero if
anything cannot be rebuilt."""
import json
import re
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool, "I8": torch.int8}


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        buf = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]) if buf else torch.empty(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"])
    return tensors, meta


def parse_levels(text):
    """A declaration as describe writes it, e.g. 'blocked 2x2 (dense(0), compressed(1), compressed(2, non-unique),
    singleton(3)) index i64': (block or None, [(type, dim, n, m)]). Every level names its dimension (describe writes
    them in full)."""
    m = re.fullmatch(r"\s*(?:blocked\s+([0-9x]+)\s*)?\((.*)\)(?:\s+index\s+\w+)?(?:\s+values\s+\w+)?\s*", text)
    if m is None:
        raise ValueError(f"cannot read the level declaration {text!r}")
    block = [int(b) for b in m.group(1).split("x")] if m.group(1) else None
    levels = []
    for kind, args in re.findall(r"(\w+)\(([^)]*)\)", m.group(2)):
        args = [a.strip() for a in args.split(",")]
        n = mm = 0
        for a in args[1:]:
            if ":" in a:
                n, mm = (int(v) for v in a.split(":"))
        levels.append((kind, int(args[0]), n, mm))
    return block, levels


def levels_to_coo(parts, declaration, shape):
    """(indices [rank, nnz], values [nnz]) of a tensor stored in a level format: the levels walked outermost first,
    as sparse/levels/level_tensor.cc's for_each_stored does, in vectorized torch: each level turns the positions of
    its parents into its own positions and the coordinates they stand for. Ranged padding (-1) is dropped; a
    non-unique level's repeated coordinates stay (sum them with coalesce)."""
    block, levels = parse_levels(declaration)
    rank = len(shape)
    extents = list(shape) if block is None else [s // b for s, b in zip(shape, block)] + list(block)
    pos = torch.zeros(1, dtype=torch.int64)  # the parents' positions reached (ranged padding dropped)
    total = 1  # the parents' positions, all of them (what a ranged level's slots divide by)
    coords = torch.zeros(len(extents), 1, dtype=torch.int64)  # their coordinates by walked dimension
    for k, (kind, dim, n, m) in enumerate(levels):
        crd = parts.get(f"coordinates_{k}")
        crd = crd.to(torch.int64) if crd is not None else None
        if kind == "dense":
            e = extents[dim]
            child = (pos[:, None] * e + torch.arange(e)).reshape(-1)
            coords = coords.repeat_interleave(e, dim=1)
            coords[dim] = torch.arange(e).repeat(pos.numel())
            total *= e
        elif kind == "compressed":
            p = parts[f"positions_{k}"].to(torch.int64)
            counts = p[pos + 1] - p[pos]
            starts = torch.repeat_interleave(p[pos], counts)
            offsets = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
            child = starts + offsets
            coords = coords.repeat_interleave(counts, dim=1)
            coords[dim] = crd[child]
            total = int(p[-1])
        elif kind == "singleton":
            child = pos
            coords[dim] = crd[child]
        elif kind == "ranged":
            width = crd.numel() // total if total else 0  # slots per parent, padding included
            child = (pos[:, None] * width + torch.arange(width)).reshape(-1)
            coords = coords.repeat_interleave(width, dim=1)
            keep = crd[child] >= 0
            child, coords = child[keep], coords[:, keep]
            coords[dim] = crd[child]
            total *= width
        elif kind == "n_out_of_m":
            groups = extents[dim] // m
            slots = torch.arange(groups * n)
            child = (pos[:, None] * groups * n + slots).reshape(-1)
            coords = coords.repeat_interleave(groups * n, dim=1)
            coords[dim] = (slots // n).repeat(pos.numel()) * m + crd[child]
            total *= groups * n
        else:
            raise ValueError(f"level {k}: unknown level type {kind!r}")
        pos = child
    if block is not None:
        coords = torch.stack([coords[d] * block[d] + coords[rank + d] for d in range(rank)])
    return coords, parts["values"].reshape(-1)[pos]


def main():
    tensors, meta = load(sys.argv[1])
    sparse = {k[len("coppice.format."):]: v for k, v in meta.items() if k.startswith("coppice.format.")}
    for w, fmt in sorted(sparse.items()):
        size = json.loads(meta["coppice.shape." + w])
        if fmt == "csr":
            t = torch.sparse_csr_tensor(tensors[w + ".crow_indices"], tensors[w + ".col_indices"],
                                        tensors[w + ".values"], size)
        elif fmt == "coo":
            t = torch.sparse_coo_tensor(tensors[w + ".indices"], tensors[w + ".values"], size)
        elif fmt == "bsr":
            t = torch.sparse_bsr_tensor(tensors[w + ".crow_indices"], tensors[w + ".col_indices"],
                                        tensors[w + ".values"], size)
        elif "coppice.attr." + w + ".levels" in meta:
            parts = {k[len(w) + 1:]: v for k, v in tensors.items() if k.startswith(w + ".")}
            indices, values = levels_to_coo(parts, meta["coppice.attr." + w + ".levels"], size)
            t = torch.sparse_coo_tensor(indices, values, size).coalesce()
        else:
            print(f"{w}: {fmt} (parts only)")
            continue
        dense = t.to_dense()
        print(f"{w}: torch {t.layout} {list(t.shape)} nnz {t._nnz()} density {t._nnz() / dense.numel():.4f} "
              f"|w| {dense.abs().sum().item():.4f}")
    parts = {w + "." for w in sparse}
    for name, t in sorted(tensors.items()):
        if not any(name.startswith(p) for p in parts):
            print(f"{name}: dense {t.dtype} {list(t.shape)}")
    print(f"read {len(tensors)} tensors, {len(sparse)} sparse weights rebuilt, {len(meta)} metadata entries")


if __name__ == "__main__":
    main()
