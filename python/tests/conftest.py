"""The tests run against the installed package (tools/test installs tools/wheel's
wheel into a venv), never python/coppice's sources, which lack the module."""
import os

import numpy as np

REPO = os.environ.get("COPPICE_REPO", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def tiny_job(**mask_update):
    """An MLP on Gaussian blobs, fc1 and fc2 at 10 % in CSR; mask_update's keys as given."""
    job = {"name": "py", "device": "cpu", "seed": 1,
           "model": {"name": "mlp", "options": {"sizes": [32, 128, 128, 4]}},
           "data": {"dataset": "synthetic", "batch_size": 32,
                    "synthetic": {"examples": 2048, "test_examples": 512, "features": 32, "classes": 4}},
           "sparsity": {"density": 0.1, "distribution": "uniform",
                        "rules": [{"regex": "fc[12]\\.weight", "format": "csr"}]},
           "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "training": {"steps": 300}}
    job["mask_update"] = mask_update or {"method": "static"}
    return job


_LENET300_RUNS = {}


def lenet300_rigl_run(seed=0, growth=None):
    """The trainer's configs/lenet300_rigl_90.yaml (LeNet-300-100 at 90 %, 20 epochs of Fashion-MNIST) on the CPU,
    at `seed` (data.shuffle_seed too) and with growth policy `growth` where given, writing no checkpoint or metrics:
    its summary. Each run is made once a session, because two tests compare against built-in RigL at seed 0 and a
    run takes about 25 s on CI's two cores."""
    key = (seed, growth)
    if key not in _LENET300_RUNS:
        import coppice
        overrides = ["device=cpu", "checkpoint.dir=", "checkpoint.every_steps=0", "checkpoint.keep_last=0",
                     "logging.metrics=", "logging.progress=false", f"seed={seed}", f"data.shuffle_seed={seed}"]
        if growth is not None:
            overrides.append(f"mask_update.growth={growth}")
        _LENET300_RUNS[key] = coppice.train(os.path.join(REPO, "configs", "lenet300_rigl_90.yaml"),
                                            overrides=overrides)
    return _LENET300_RUNS[key]


def numeric_gradient(f, array, eps=1e-6):
    """Central differences of the scalar f() in every entry of `array`, which f reads through a Variable on the
    array's own memory (no copy), so perturbing the array in place perturbs the Variable."""
    g = np.zeros_like(array)
    for i in np.ndindex(array.shape):
        saved = array[i]
        array[i] = saved + eps
        up = f()
        array[i] = saved - eps
        down = f()
        array[i] = saved
        g[i] = (up - down) / (2 * eps)
    return g
