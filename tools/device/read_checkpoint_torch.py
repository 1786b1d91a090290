#!/usr/bin/env python3
"""Reads a Coppice checkpoint with PyTorch alone (issue 6: checkpoints that
PyTorch can read): parses the safetensors header, loads every dense entry with
torch.frombuffer, rebuilds each sparse weight from its parts and the
coppice.format / coppice.shape metadata (sparse/io/sparse_safetensors.h), and
prints one line per tensor. Exits non-zero if anything cannot be rebuilt."""
import json
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
