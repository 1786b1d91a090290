#!/usr/bin/env python3
"""Compares the sparse masks of two runs' checkpoints, step by step:

    compare_masks.py DIR_A DIR_B

For every step with a checkpoint in both directories (ckpt-<step>.safetensors)
and every CSR weight, prints how many stored positions differ (in one run
but not the other) out of the weight's nnz. run_multi_gpu.sh uses it to show
where a 2-GPU run's masks part from a 1-GPU run's (a near-tie in a mask
update picked the other way), and that two 1-GPU runs part the same way."""
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_checkpoint_torch import load  # noqa: E402


def positions(tensors, meta, w):
    crow = tensors[w + ".crow_indices"].long()
    col = tensors[w + ".col_indices"].long()
    cols = int(meta["coppice.shape." + w].strip("[]").split(",")[1])
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), crow[1:] - crow[:-1])
    return set((rows * cols + col).tolist())


def steps(d):
    out = {}
    for f in os.listdir(d):
        m = re.fullmatch(r"ckpt-(\d+)\.safetensors", f)
        if m:
            out[int(m.group(1))] = os.path.join(d, f)
    return out


def main():
    a, b = steps(sys.argv[1]), steps(sys.argv[2])
    common = sorted(set(a) & set(b))
    if not common:
        print("    compare_masks: no checkpoint step in both directories")
        return 1
    for s in common:
        (ta, ma), (tb, mb) = load(a[s]), load(b[s])
        parts = []
        for key, fmt in sorted(ma.items()):
            if not key.startswith("coppice.format.") or fmt != "csr":
                continue
            w = key[len("coppice.format."):]
            pa, pb = positions(ta, ma, w), positions(tb, mb, w)
            parts.append(f"{w.removeprefix('model.')} {len(pa ^ pb)}/{len(pa)}")
        print(f"    step {s}: positions in one mask only: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
