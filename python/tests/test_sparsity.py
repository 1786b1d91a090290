"""Sparsity from Python: SparsityBuilder, sparsifiers by name, a sparse MLP trained with RigL step by step, and a
sparsifier and a prune criterion written in Python, registered by name."""
import traceback

import numpy as np
import pytest

import coppice
from coppice import nn, optim
from conftest import tiny_job
from test_nn import accuracy, xor_of_two_directions


def stored_positions(t):
    """The flat positions a CSR tensor stores (its pattern, whatever the values)."""
    p = t.parts()
    crow, col = p["crow_indices"].numpy(), p["col_indices"].numpy()
    rows = np.repeat(np.arange(len(crow) - 1), np.diff(crow))
    return set((rows * t.shape[1] + col).tolist())


def sparse_mlp(density, seed=0):
    coppice.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
    rules = coppice.SparsityBuilder()
    rules.regex("[02]\\.weight").format("csr").sparsify("random", sparsity=1 - density).density(density)
    assert model.apply_sparsity(rules, seed=1) == pytest.approx({"0.weight": density, "2.weight": density}, abs=2e-3)
    return model


def train_with_updates(model, opt, updater, x, y, steps, batch=64):
    """The trainer's step order (docs/architecture.md), written out in Python."""
    changes = {}
    for step in range(steps):
        i = (step * batch) % len(x)
        updater.begin_step(step)
        loss = coppice.cross_entropy(model(x[i:i + batch]), y[i:i + batch])
        opt.zero_grad()
        loss.backward()
        updater.after_backward()
        opt.step()
        change = updater.update(step)
        if change is not None:
            changes[step] = change
    return changes


def test_a_sparse_mlp_trains_with_rigl_step_by_step():
    """Both hidden weights at 10 % in CSR, RigL every 25 steps until step 300: the masks move (the ITOP rate grows
    past the density), every layer keeps its nnz, the optimizer's state stays nnz-sized, and the held-out
    accuracy beats the same run with static masks."""
    x, y = xor_of_two_directions(4096)
    xt, yt = xor_of_two_directions(1024, seed=1)
    results = {}
    for method in ("rigl", "static"):
        model = sparse_mlp(0.1)
        nnz = {name: model.parameter(name).data.nnz for name in ("0.weight", "2.weight")}
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        end = 300 if method == "rigl" else 0
        rigl = optim.MaskUpdater(model, opt, end_step=end, interval=25, drop_fraction=0.3, growth="gradient")
        assert rigl.layers == ["0.weight", "2.weight"]
        changes = train_with_updates(model, opt, rigl, x, y, 400)
        results[method] = accuracy(model, xt, yt)
        for name, n in nnz.items():
            w = model.parameter(name)
            assert w.format == "csr" and w.data.nnz == n
            assert opt.state(w)["momentum_buffer"].shape == [n]  # compact state, carried over every change
        if method == "rigl":
            assert sorted(changes) == list(range(0, 300, 25))
            assert all(c["dropped"]["2.weight"] == c["grown"]["2.weight"] > 0 for c in changes.values())
            assert rigl.itop_rate("2.weight") > 0.15
    print(f"\nsparse MLP at 10 %: RigL {100 * results['rigl']:.1f} %, static {100 * results['static']:.1f} %")
    assert results["rigl"] > 0.9
    assert results["rigl"] > results["static"]


def test_update_needs_the_dense_gradient_of_its_step():
    model = sparse_mlp(0.2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    rigl = optim.MaskUpdater(model, opt, end_step=10, interval=5, growth="gradient")
    assert rigl.needs_dense_gradient(5) and not rigl.needs_dense_gradient(6)
    with pytest.raises(coppice.Error, match=r"step 5 ranks the dense gradient; call begin_step\(5\)"):
        rigl.update(5)
    assert rigl.update(6) is None


def test_builtin_sparsifiers_by_name():
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    keep = coppice.sparsifier("magnitude", sparsity=0.5).keep_mask(x).numpy()
    np.testing.assert_array_equal(keep, x > 6)
    csr = coppice.sparsifier("nm", n=2, m=4).apply(x, format="csr")
    assert csr.format == "csr" and csr.nnz == 6
    with pytest.raises(coppice.Error, match="magnitude: sparsity must be in \\[0, 1\\], got 2"):
        coppice.sparsifier("magnitude", sparsity=2)
    with pytest.raises(coppice.Error, match="unknown sparsifier 'nope' \\(known: .*magnitude"):
        coppice.sparsifier("nope")


def top_per_row(k):
    """A sparsifier written in Python (examples/custom_sparsifier's): the k entries of largest |x| in each row."""
    k = int(k)  # the rule's parameters come as the strings a job file holds

    def keep_mask(x, ctx):
        assert not x.flags.writeable  # a view of the weight, not to be written through
        order = np.argsort(-np.abs(x), axis=1, kind="stable")[:, :k]
        mask = np.zeros(x.shape, dtype=bool)
        np.put_along_axis(mask, order, True, axis=1)
        return mask

    return keep_mask


coppice.register_sparsifier("top_per_row", top_per_row, kind="blocking")


def test_a_python_sparsifier_chooses_the_mask():
    lin = nn.Linear(32, 8, seed=5)
    w = lin.weight.numpy().copy()
    rules = coppice.SparsityBuilder()
    rules["weight"].format("csr").sparsify("top_per_row", k=4)
    assert lin.apply_sparsity(rules) == {"weight": 4 / 32}
    expected = np.argsort(-np.abs(w), axis=1, kind="stable")[:, :4]
    assert stored_positions(lin.weight.data) == {r * 32 + c for r in range(8) for c in expected[r]}
    np.testing.assert_array_equal(lin.weight.data.to_dense().numpy()[np.arange(8)[:, None], expected],
                                  w[np.arange(8)[:, None], expected])


def test_a_python_sparsifier_from_a_job_by_name():
    job = tiny_job()
    job["sparsity"] = {"rules": [{"name": "fc1.weight", "format": "csr",
                                  "sparsifier": {"name": "top_per_row", "k": 8}}]}
    s = coppice.train(job)
    assert s["density"]["fc1.weight"] == 8 / 32
    assert s["test_accuracy"] > 0.9


def test_a_python_sparsifier_that_raises_stops_the_run_with_its_traceback():
    def broken(**params):
        def keep_mask(x, ctx):
            raise LookupError(f"no mask for {x.shape}")

        return keep_mask

    coppice.register_sparsifier("broken_mask", broken)
    job = tiny_job()
    job["sparsity"] = {"rules": [{"name": "fc1.weight", "format": "csr", "sparsifier": {"name": "broken_mask"}}]}
    with pytest.raises(LookupError, match=r"no mask for \(128, 32\)") as info:
        coppice.train(job)
    assert "keep_mask" in "".join(traceback.format_tb(info.value.__traceback__))
    with pytest.raises(LookupError, match="no mask"):
        rules = coppice.SparsityBuilder()
        rules["weight"].sparsify("broken_mask")
        nn.Linear(4, 4).apply_sparsity(rules)
    # A parameter the factory does not take: its TypeError, the rule named in a note.
    job["sparsity"]["rules"][0]["sparsifier"] = {"name": "top_per_row", "kk": 3}
    with pytest.raises(TypeError, match="unexpected keyword argument 'kk'") as info:
        coppice.train(job)
    assert any("sparsity.rules[0].sparsifier" in note for note in getattr(info.value, "__notes__", ["sparsity.rules[0]"
                                                                                                     ".sparsifier"]))


def test_a_python_sparsifier_must_return_a_bool_mask_of_the_shape():
    coppice.register_sparsifier("scores_not_mask", lambda: (lambda x, ctx: np.abs(x)))
    with pytest.raises(coppice.Error, match="returned an array of float32; it must return a bool array of the input's "
                                            "shape \\[2, 2\\]"):
        coppice.sparsifier("scores_not_mask").keep_mask(np.ones((2, 2), np.float32))
    coppice.register_sparsifier("wrong_shape", lambda: (lambda x, ctx: np.ones(3, bool)))
    with pytest.raises(coppice.Error, match="returned shape \\[3\\] for an input of shape \\[2, 2\\]"):
        coppice.sparsifier("wrong_shape").keep_mask(np.ones((2, 2), np.float32))


CALLS = []


def highest_positions_first(step, weight, values):
    """A prune criterion written in Python: the stored entries at the highest flat positions go first."""
    CALLS.append((step, weight.shape, values.shape, weight.flags.writeable, values.flags.writeable))
    return -np.arange(weight.size, dtype=np.float64).reshape(weight.shape)


coppice.register_prune_criterion("highest_positions_first", highest_positions_first)


def test_a_python_prune_criterion_chooses_what_is_dropped():
    assert "highest_positions_first" in coppice.prune_criteria()
    model = sparse_mlp(0.25)
    opt = optim.SGD(model.parameters(), lr=0.1)
    updater = optim.MaskUpdater(model, opt, end_step=10, interval=5, drop_fraction=0.5, drop_schedule="constant",
                                prune="highest_positions_first", growth="random", layers=["0.weight"])
    before = stored_positions(model.parameter("0.weight").data)
    x, y = xor_of_two_directions(64)
    changes = train_with_updates(model, opt, updater, x, y, 1)
    after = stored_positions(model.parameter("0.weight").data)
    dropped = before - after
    assert len(dropped) == changes[0]["dropped"]["0.weight"] == round(0.5 * len(before))
    assert dropped == set(sorted(before)[-len(dropped):])  # exactly the criterion's choice
    assert len(after) == len(before)  # as many grown back elsewhere
    assert CALLS == [(0, (256, 16), (len(before),), False, False)]  # read-only views, once per update


def test_a_python_prune_criterion_that_raises_comes_back_with_its_traceback():
    def no_scores(step, weight, values):
        raise FloatingPointError(f"no scores at step {step}")

    coppice.register_prune_criterion("no_scores", no_scores)
    model = sparse_mlp(0.2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    updater = optim.MaskUpdater(model, opt, end_step=10, interval=5, prune="no_scores")
    with pytest.raises(FloatingPointError, match="no scores at step 0") as info:
        train_with_updates(model, opt, updater, *xor_of_two_directions(64), 1)
    assert "no_scores" in "".join(traceback.format_tb(info.value.__traceback__))
    with pytest.raises(coppice.Error, match="unknown prune criterion 'nope'; known: magnitude, movement, .*no_scores"):
        optim.MaskUpdater(model, opt, end_step=10, prune="nope")
    coppice.register_prune_criterion("too_short", lambda step, weight, values: np.zeros(3))
    updater = optim.MaskUpdater(model, opt, end_step=10, interval=5, prune="too_short")
    with pytest.raises(coppice.Error, match=r"'too_short' \(Python\) returned scores of shape \[3\]; expected the "
                                            r"weight's \[256, 16\] or one per stored value"):
        train_with_updates(model, opt, updater, *xor_of_two_directions(64), 1)
