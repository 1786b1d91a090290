"""Growth policies written in Python, used by jobs by name."""
import time

import numpy as np
import pytest

import coppice
from conftest import tiny_job


def python_rigl(layer, step, k, candidates, weight, gradient):
    """RigL's growth: the k candidates of largest |gradient|, ties to the lower position."""
    score = np.abs(gradient.ravel()[candidates])
    return candidates[np.argsort(-score, kind="stable")[:k]]


def test_a_python_policy_equal_to_rigl_trains_the_same_run():
    coppice.register_growth_policy("python_rigl", python_rigl)
    assert "python_rigl" in coppice.growth_policies()
    mu = dict(method="rigl", end_step=200, interval=20, drop_fraction=0.3)
    builtin = coppice.train(tiny_job(**mu))
    python = coppice.train(tiny_job(**mu, growth="python_rigl"))
    assert python["losses"] == builtin["losses"]  # the same positions grown: bit for bit
    assert python["test_accuracy"] == builtin["test_accuracy"]


def test_an_exception_in_a_policy_stops_the_run_with_its_traceback():
    def broken(layer, step, k, candidates, weight, gradient):
        raise ArithmeticError(f"no growth for {layer}")

    coppice.register_growth_policy("broken", broken)
    with pytest.raises(ArithmeticError, match="no growth for fc1.weight"):
        coppice.train(tiny_job(method="rigl", end_step=200, interval=20, growth="broken"))


def test_a_policy_that_returns_the_wrong_count_is_refused():
    coppice.register_growth_policy("too_few", lambda k, candidates, **_: candidates[: max(k - 1, 0)])
    with pytest.raises(coppice.Error, match="too_few"):
        coppice.train(tiny_job(method="rigl", end_step=200, interval=20, growth="too_few"))


def test_the_python_policy_overhead_is_measured():
    """What a Python policy costs against the same policy in C++ (printed; tools/test shows it with -s)."""
    coppice.register_growth_policy("python_rigl_timed", python_rigl)
    mu = dict(method="rigl", end_step=290, interval=10, drop_fraction=0.3)
    t = {}
    for growth in ("gradient", "python_rigl_timed"):
        start = time.perf_counter()
        s = coppice.train(tiny_job(**mu, growth=growth))
        t[growth] = (time.perf_counter() - start, s["mask_update_overhead_s"], s["mask_updates"])
    print(f"\ngrowth overhead over {t['gradient'][2]} updates of 2 layers: C++ {t['gradient'][1]:.4f} s, "
          f"Python {t['python_rigl_timed'][1]:.4f} s (runs {t['gradient'][0]:.2f} s and {t['python_rigl_timed'][0]:.2f} s)")
    assert t["python_rigl_timed"][2] == t["gradient"][2]


def neighbour_growth(layer, step, k, candidates, weight, gradient):
    """Grow where |gradient| x |the stored neighbours in the row| is largest (issue 20's example policy): new
    weights next to strong ones. A small floor lets a row with no stored neighbour grow too."""
    w = np.abs(weight)
    neighbours = np.zeros_like(w)
    neighbours[:, 1:] += w[:, :-1]
    neighbours[:, :-1] += w[:, 1:]
    score = (np.abs(gradient) * (neighbours + 1e-3)).ravel()[candidates]
    return candidates[np.argsort(-score, kind="stable")[:k]]


def test_lenet300_with_a_python_policy_matches_builtin_rigl():
    """LeNet-300-100 at 90 % (configs/lenet300_rigl_90.yaml, 20 epochs of Fashion-MNIST): the neighbour policy
    in Python against built-in RigL: at most 0.5 points of test accuracy below it."""
    from conftest import lenet300_rigl_run
    coppice.register_growth_policy("neighbour_gradient_py", neighbour_growth)
    rigl = lenet300_rigl_run()
    python = lenet300_rigl_run(growth="neighbour_gradient_py")
    print(f"\nLeNet-300-100 90 %: built-in RigL {100 * rigl['test_accuracy']:.2f} %, Python neighbour growth "
          f"{100 * python['test_accuracy']:.2f} %; update overhead {rigl['mask_update_overhead_s']:.2f} s vs "
          f"{python['mask_update_overhead_s']:.2f} s")
    assert python["test_accuracy"] >= rigl["test_accuracy"] - 0.005
