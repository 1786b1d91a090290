#!/usr/bin/env python3
"""LeNet-300-100 at 90 % sparsity trained with RigL as a plain PyTorch loop, on Coppice's kernels
(coppice.torch): the PyTorch twin of configs/lenet300_rigl_90.yaml.

    python3 examples/pytorch_rigl/lenet300_rigl.py [--epochs 20] [--device cpu|cuda] [--data DIR]

The job's recipe, in PyTorch's own pieces: Fashion-MNIST scaled to [0, 1] and normalized with the training set's
mean 0.2860 and std 0.3530, the last 6000 training images held out (validation_split 0.1), batches of 128
shuffled each epoch; fc1, fc2 and fc3 made CSR at 10 % overall by ERK, keeping the largest weights of the
initialisation (sparsify_'s magnitude criterion, the job's default sparsifier; fc3 comes out dense in format);
SGD (lr 0.1, momentum 0.9, Nesterov, weight decay 5e-4) with 200 warm-up steps from a factor of 0.1, then cosine
to 0; RigL (coppice.torch.MaskUpdater) every 100 steps until 75 % of training, dropping 30 % on a cosine
schedule. Prints one JSON line: test accuracy, steps, seconds, layer densities.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import coppice.torch as ct

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    """An IDX file (gzip'd) as a NumPy array: images [n, rows, cols] uint8 or labels [n]."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split, data_dir):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz")).reshape(-1, 784)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def lr_at(step, total, base=0.1, warmup=200, start_factor=0.1):
    if step < warmup:
        return base * (start_factor + (1 - start_factor) * step / warmup)
    return base * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))) / 2


def train(epochs=20, device="cpu", data_dir=DATA, seed=0, batch=128):
    torch.manual_seed(seed)
    dev = torch.device(device)
    x, y = load("train", data_dir)
    x_test, y_test = load("t10k", data_dir)
    x, y = x[:-6000].to(dev), y[:-6000].to(dev)  # the last 10 % validate in the job
    model = torch.nn.Sequential(torch.nn.Linear(784, 300), torch.nn.ReLU(), torch.nn.Linear(300, 100),
                                torch.nn.ReLU(), torch.nn.Linear(100, 10)).to(dev)
    ct.sparsify_(model, [{"regex": r"[024]", "format": "csr"}], density=0.1, distribution="erk")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps_per_epoch = -(-x.shape[0] // batch)
    total = epochs * steps_per_epoch
    updater = ct.MaskUpdater(model, opt, method="rigl", end_step=int(0.75 * total), interval=100,
                             drop_fraction=0.3, drop_schedule="cosine", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    step, start = 0, time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=gen).to(dev)
        for k in range(steps_per_epoch):
            idx = order[k * batch:(k + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total)
            updater.begin_step(step)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            updater.step(step)
            step += 1
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(x_test.to(dev)).argmax(1) == y_test.to(dev)).float().mean().item()
    densities = {name: round(m.density, 4) for name, m in updater.layers.items()}
    return {"test_accuracy": accuracy, "steps": step, "seconds": round(seconds, 2), "densities": densities,
            "final_loss": float(loss)}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default=DATA)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(json.dumps(train(a.epochs, a.device, a.data, a.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
