#!/usr/bin/env python3
"""The level family's generic CPU kernels against the specialized ones on the same pattern (issue 35): a weight
declared "(dense, compressed) index i64" (CSR's levels with i64 indices: no built-in format fits, so the generic
kernels run) beside the same weight as built-in CSR (its own kernels), and a declared "(dense, compressed)"
(CSR's declaration: routed to CSR's kernels). linear forward (x W^T), dx (dy W) and dW (sddmm) at 90 % sparsity,
the best of 7 runs each, on the CPU, against the installed wheel:

    python3 tools/bench/levels_generic_cost.py [OUT IN BATCH]     (default 1024 1024 256)

One JSON line, then a line per product."""
import json, sys, time
import numpy as np
import coppice
from coppice import levels

levels.register("bench_csr_i64", "(dense, compressed) index i64")
levels.register("bench_csr_levels", "(dense, compressed)")
out_f, in_f, batch = [int(a) for a in sys.argv[1:4]] if len(sys.argv) > 3 else (1024, 1024, 256)
rng = np.random.default_rng(0)
w = rng.standard_normal((out_f, in_f)).astype(np.float32)
mask = rng.random(w.shape) < 0.1
x = rng.standard_normal((batch, in_f)).astype(np.float32)
dy = rng.standard_normal((batch, out_f)).astype(np.float32)


def best(f, reps=7):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


rows = {}
for fmt in ["csr", "bench_csr_levels", "bench_csr_i64"]:
    s = coppice.sparse_from_mask(w, mask, fmt)
    rows[fmt] = {
        "linear": best(lambda: coppice.kernels.linear(x, s)),
        "linear_dx": best(lambda: coppice.matmul(dy, s)),
        "linear_dw": best(lambda: coppice.kernels.linear_backward(dy, x, s, x_grad=False)),
    }
print(json.dumps({"shape": [out_f, in_f], "batch": batch, "density": 0.1, "ms": rows}))
for op in ["linear", "linear_dx", "linear_dw"]:
    print(f"{op:10s} csr {rows['csr'][op]:8.3f} ms  declared=csr {rows['bench_csr_levels'][op]:8.3f} ms  "
          f"generic {rows['bench_csr_i64'][op]:8.3f} ms  ({rows['bench_csr_i64'][op] / rows['csr'][op]:.2f}x csr)")
