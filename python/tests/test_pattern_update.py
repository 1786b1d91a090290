"""The mask updates' selections over plain tensors (python/bind_pattern_update.cc): coppice.optim.PatternUpdater
(prune and regrow without a model or an optimizer: RigL on CSR, BSR and n:m layers, keep_from, the schedule, its
state), GMP's schedule and one-shot pruning, coppice.nm_mask (SR-STE's n:m selection) against NumPy references, and
the errors each refuses with, by name."""
import itertools
import re

import numpy as np
import pytest

import coppice
from coppice import optim

SHAPE = (16, 24)


def csr_layer(seed, density=0.25):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    return coppice.sparse_from_mask(w, rng.random(SHAPE) < density, "csr")


def bsr_layer(seed, block=4):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    blocks = rng.random((SHAPE[0] // block, SHAPE[1] // block)) < 0.3
    blocks[0, 0] = blocks[-1, -1] = True
    mask = np.kron(blocks, np.ones((block, block), bool))
    return coppice.sparse_from_mask(w, mask, "bsr", block_rows=block, block_cols=block)


def nm_layer(seed, n=2, m=4):
    w = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
    return coppice.sparse_from_mask(w, coppice.nm_mask(w, n, m), "nm", n=n, m=m)


def slot_of_position(t):
    """For a sparse tensor: an int array of its shape, the value slot (flattened values) stored there, -1 elsewhere."""
    slots = np.arange(1, coppice.values(t).numpy().size + 1, dtype=np.float32)
    numbered = coppice.with_values(t, slots.reshape(coppice.values(t).numpy().shape))
    return numbered.to_dense().numpy().astype(np.int64) - 1


def flat_values(t):
    return coppice.values(t).numpy().reshape(-1)


def check_change(old, new, keep_from):
    """keep_from maps every survivor to its old slot at the same position, with the same bits; grown entries are
    zero and new. Returns (kept, dropped, grown) as sets of flat positions."""
    old_slots, new_slots = slot_of_position(old).reshape(-1), slot_of_position(new).reshape(-1)
    k = keep_from.numpy()
    assert k.dtype == np.int64 and k.shape == (flat_values(new).size,)
    old_v, new_v = flat_values(old), flat_values(new)
    kept, grown = set(), set()
    for pos in np.flatnonzero(new_slots >= 0):
        s = new_slots[pos]
        if k[s] >= 0:
            assert old_slots[pos] == k[s], f"slot {s} at {pos} came from {k[s]}, which held {old_slots[pos]}"
            assert new_v[s].view(np.uint32) == old_v[k[s]].view(np.uint32)
            kept.add(int(pos))
        else:
            assert new_v[s] == 0 and old_slots[pos] < 0
            grown.add(int(pos))
    dropped = set(np.flatnonzero(old_slots >= 0).tolist()) - kept
    return kept, dropped, grown


def rigl(**kw):
    args = dict(growth="gradient", end_step=40, interval=10, drop_fraction=0.3, drop_schedule="constant")
    args.update(kw)
    return optim.PatternUpdater(**args)


# ---- prune and regrow ---------------------------------------------------------------------------


def test_rigl_on_csr_drops_the_smallest_and_grows_the_largest_gradients():
    a, b = csr_layer(1), csr_layer(2)
    u = rigl()
    u.add_layer("a", a)
    u.add_layer("b", b)
    assert u.layers == ["a", "b"]
    assert u.is_update_step(0) and u.needs_dense_gradient(0) and not u.needs_momentum(0)
    assert not u.is_update_step(5) and not u.needs_dense_gradient(5)
    rng = np.random.default_rng(7)
    grads = {n: rng.standard_normal(SHAPE).astype(np.float32) for n in ("a", "b")}
    r = u.update(0, {"a": {"param": a, "gradient": grads["a"]}, "b": {"param": b, "gradient": grads["b"]}})
    assert r["updated"] and r["step"] == 0 and r["drop_fraction"] == 0.3
    assert list(r["layers"]) == ["a", "b"]
    for name, old in (("a", a), ("b", b)):
        out = r["layers"][name]
        new = out["param"]
        assert new.format == "csr" and out["changed"]
        assert out["nnz"] == old.nnz == new.nnz
        assert out["density"] == pytest.approx(old.nnz / old.numel())
        kept, dropped, grown = check_change(old, new, out["keep_from"])
        k = round(0.3 * old.nnz)
        assert out["dropped"] == len(dropped) == k and out["grown"] == len(grown) == k
        w = old.to_dense().numpy().reshape(-1)
        stored = np.flatnonzero(slot_of_position(old).reshape(-1) >= 0)
        assert dropped == set(stored[np.argsort(np.abs(w[stored]), kind="stable")[:k]].tolist())
        g = np.abs(grads[name].reshape(-1))
        empty = np.setdiff1d(np.arange(w.size), stored)
        assert grown == set(empty[np.argsort(-g[empty], kind="stable")[:k]].tolist())
        assert out["itop_rate"] == pytest.approx((old.nnz + k) / old.numel()) == u.itop_rate(name)
    assert r["nnz"] == a.nnz + b.nnz and r["numel"] == 2 * a.numel()
    assert r["density"] == pytest.approx(r["nnz"] / r["numel"])


def test_rigl_on_bsr_moves_whole_blocks():
    w = bsr_layer(3)
    u = rigl(drop_fraction=0.5)
    u.add_layer("w", w)
    g = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    out = u.update(0, {"w": {"param": w, "gradient": g}})["layers"]["w"]
    new = out["param"]
    assert new.format == "bsr" and new.attributes() == {"block_rows": 4, "block_cols": 4}
    assert new.nnz == w.nnz and out["changed"]
    kept, dropped, grown = check_change(w, new, out["keep_from"])
    nblocks = w.nnz // 16
    k = round(0.5 * nblocks)
    assert out["dropped"] == len(dropped) == 16 * k and out["grown"] == len(grown) == 16 * k

    def blocks_of(positions):
        return {(p // SHAPE[1] // 4, p % SHAPE[1] // 4) for p in positions}

    # Blocks of smallest sum of squares of w go; those of largest sum of squares of the gradient come.
    dense = w.to_dense().numpy()
    sums = (dense.reshape(4, 4, 6, 4) ** 2).sum(axis=(1, 3))
    gsums = (g.astype(np.float64).reshape(4, 4, 6, 4) ** 2).sum(axis=(1, 3))
    stored = sorted(blocks_of(np.flatnonzero(slot_of_position(w).reshape(-1) >= 0)))
    assert blocks_of(dropped) == set(sorted(stored, key=lambda b: sums[b])[:k])
    empty = [b for b in itertools.product(range(4), range(6)) if b not in stored]
    assert blocks_of(grown) == set(sorted(empty, key=lambda b: -gsums[b])[:k])


def test_rigl_nm_regrows_within_each_group():
    w = nm_layer(5)
    u = rigl(drop_fraction=0.5)
    u.add_layer("w", w)
    g = np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32)
    out = u.update(0, {"w": {"param": w, "gradient": g}})["layers"]["w"]
    new = out["param"]
    assert new.format == "nm" and new.attributes() == {"n": 2, "m": 4} and new.nnz == w.nnz
    kept, dropped, grown = check_change(w, new, out["keep_from"])
    assert len(dropped) == len(grown) == out["dropped"] == out["grown"] > 0
    stored = (slot_of_position(new) >= 0).reshape(SHAPE[0], -1, 4)
    assert (stored.sum(axis=2) == 2).all()  # every group keeps its n
    group = lambda p: (p // SHAPE[1], p % SHAPE[1] // 4)  # noqa: E731
    assert sorted(map(group, dropped)) == sorted(map(group, grown))


def test_steps_that_are_not_update_steps_change_nothing():
    a = csr_layer(1)
    u = rigl(start_step=10)
    u.add_layer("a", a)
    before = a.to_dense().numpy().copy()
    for step in (0, 9, 11, 19, 40, 50):
        assert not u.is_update_step(step)
        r = u.update(step, {"a": {"param": a}})  # no gradient needed
        out = r["layers"]["a"]
        assert not r["updated"] and not out["changed"] and out["keep_from"] is None
        assert out["dropped"] == out["grown"] == 0 and out["nnz"] == a.nnz
        np.testing.assert_array_equal(out["param"].to_dense().numpy(), before)
        np.testing.assert_array_equal(slot_of_position(out["param"]), slot_of_position(a))
    assert u.itop_rate("a") == pytest.approx(a.nnz / a.numel())
    assert [s for s in range(60) if u.is_update_step(s)] == [10, 20, 30]


def test_the_drop_fraction_schedule_and_random_growth():
    u = optim.PatternUpdater(end_step=100, interval=10, drop_fraction=0.4)  # cosine, random (SET)
    assert u.drop_fraction(0) == pytest.approx(0.4) and u.drop_fraction(50) == pytest.approx(0.2)
    assert u.drop_fraction(100) == 0.0 and not u.needs_dense_gradient(0)
    a = csr_layer(8)
    u.add_layer("a", a)
    out = u.update(0, {"a": {"param": a}})["layers"]["a"]
    check_change(a, out["param"], out["keep_from"])
    assert out["grown"] == round(0.4 * a.nnz)
    # Random growth is keyed by (seed, layer, step): the same masks again.
    v = optim.PatternUpdater(end_step=100, interval=10, drop_fraction=0.4)
    v.add_layer("a", a)
    again = v.update(0, {"a": {"param": a}})["layers"]["a"]
    np.testing.assert_array_equal(slot_of_position(again["param"]), slot_of_position(out["param"]))
    assert "growth='random'" in repr(u) and "layers=[a]" in repr(u)


def test_momentum_growth_takes_the_momentum():
    a = csr_layer(9)
    u = optim.PatternUpdater(growth="momentum", end_step=10, interval=5, drop_fraction=0.3)
    u.add_layer("a", a)
    assert u.needs_momentum(0) and not u.needs_dense_gradient(0)
    mom = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    out = u.update(0, {"a": {"param": a, "momentum": mom}})["layers"]["a"]
    check_change(a, out["param"], out["keep_from"])
    with pytest.raises(coppice.Error, match=r"layer a.*growth 'momentum' needs the momentum of shape \[16, 24\]"):
        u.update(0, {"a": {"param": a}})


def test_a_dlpack_producer_is_taken_for_an_array():
    """Arrays that are not NumPy but have __dlpack__ (PyTorch tensors) come in through DLPack."""
    a = csr_layer(1)
    g = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)

    class Producer:
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return coppice.tensor(self.array).__dlpack__()

    def update(gradient):
        u = rigl()
        u.add_layer("a", a)
        return u.update(0, {"a": {"param": a, "gradient": gradient}})["layers"]["a"]["param"]

    np.testing.assert_array_equal(slot_of_position(update(Producer(g))), slot_of_position(update(g)))

    class Refusing:
        def __dlpack__(self, stream=None):
            raise RuntimeError("Can't export tensors that require gradient")

    u = rigl()
    u.add_layer("a", a)
    with pytest.raises(coppice.Error, match=r"inputs\['a'\]\['gradient'\]: Refusing.__dlpack__\(\) raised "
                                            r"RuntimeError: Can't export") as e:
        u.update(0, {"a": {"param": a, "gradient": Refusing()}})
    assert isinstance(e.value.__cause__, RuntimeError)


def test_state_dict_round_trip():
    a, b = csr_layer(1), bsr_layer(2)
    u = rigl()
    u.add_layer("a", a)
    u.add_layer("b", b)
    rng = np.random.default_rng(3)
    r = u.update(0, {n: {"param": p, "gradient": rng.standard_normal(SHAPE).astype(np.float32)}
                     for n, p in (("a", a), ("b", b))})
    state = u.state_dict()
    assert sorted(state) == ["a.ever_active", "b.ever_active"]
    assert state["a.ever_active"].numpy().dtype == np.bool_ and state["a.ever_active"].shape == list(SHAPE)
    assert state["a.ever_active"].numpy().sum() == a.nnz + r["layers"]["a"]["grown"]

    v = rigl()
    v.add_layer("a", a)
    v.add_layer("b", b)
    assert v.itop_rate("a") < u.itop_rate("a")
    v.load_state_dict({k: t.numpy() for k, t in state.items()},
                      params={n: r["layers"][n]["param"] for n in ("a", "b")})
    for name in ("a", "b"):
        assert v.itop_rate(name) == u.itop_rate(name)
    again = v.state_dict()
    for key in state:
        np.testing.assert_array_equal(again[key].numpy(), state[key].numpy())

    with pytest.raises(coppice.Error, match=r"PatternUpdater.load_state_dict: missing 'b.ever_active'"):
        v.load_state_dict({"a.ever_active": state["a.ever_active"]})
    with pytest.raises(coppice.Error, match=r"entry 'c.ever_active' belongs to no layer"):
        v.load_state_dict(dict(state, **{"c.ever_active": state["a.ever_active"]}))
    with pytest.raises(coppice.Error, match=r"'a.ever_active' must be bool of shape \[16, 24\]"):
        v.load_state_dict(dict(state, **{"a.ever_active": np.zeros((2, 2), bool)}))
    with pytest.raises(coppice.Error, match=r"PatternUpdater.load_state_dict: no layer 'c'"):
        v.load_state_dict(state, params={"c": a})


def test_movement_pruning_accumulates_and_keeps_its_scores():
    a = csr_layer(4)
    u = optim.PatternUpdater(prune="movement", growth="random", end_step=10, interval=5, drop_fraction=0.25)
    u.add_layer("a", a)
    with pytest.raises(coppice.Error, match="prune criterion 'movement' has no scores"):
        u.update(0, {"a": {"param": a}})
    g = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    u.accumulate_movement("a", a, g)
    state = u.state_dict()
    assert state["a.movement_steps"].numpy() == 1 and state["a.movement_scores"].shape == [a.nnz]
    out = u.update(0, {"a": {"param": a}})["layers"]["a"]
    kept, dropped, _ = check_change(a, out["param"], out["keep_from"])
    # Smallest -w * g goes.
    score = -(a.to_dense().numpy() * g).reshape(-1)
    stored = np.flatnonzero(slot_of_position(a).reshape(-1) >= 0)
    assert dropped == set(stored[np.argsort(score[stored], kind="stable")[:len(dropped)]].tolist())
    with pytest.raises(coppice.Error, match=r"'a.movement_scores' has \d+ entries, the layer's parameter stores"):
        u.load_state_dict(state, params={"a": csr_layer(5, density=0.6)})  # another nnz


def test_the_keywords_are_mask_updaters():
    """PatternUpdater takes MaskUpdater's schedule keywords, with the same types and defaults."""
    def keywords(cls):
        sig = re.search(r"__init__\(self: [\w.]+, (.*)\) -> None", cls.__init__.__doc__).group(1)
        return [k.strip() for k in sig.split(", ")]

    mask_updater = [k for k in keywords(optim.MaskUpdater)
                    if not k.startswith(("model:", "optimizer:", "layers:"))]
    assert keywords(optim.PatternUpdater) == mask_updater


# ---- errors ---------------------------------------------------------------------------------


def test_bad_configurations_are_refused_by_name():
    with pytest.raises(coppice.Error, match=r"unknown growth policy 'nope'; known: .*gradient"):
        optim.PatternUpdater(end_step=10, growth="nope")
    with pytest.raises(coppice.Error, match=r"PatternUpdater: unknown prune criterion 'nope'"):
        optim.PatternUpdater(end_step=10, prune="nope")
    with pytest.raises(coppice.Error, match=r"unknown drop-fraction schedule 'sine'"):
        optim.PatternUpdater(end_step=10, drop_schedule="sine")
    with pytest.raises(coppice.Error, match=r"drop_fraction must be in \[0, 1\], got 1.5"):
        optim.PatternUpdater(end_step=10, drop_fraction=1.5)
    with pytest.raises(coppice.Error, match=r"end_step \(5\) is before start_step \(10\)"):
        optim.PatternUpdater(start_step=10, end_step=5)


def test_bad_layers_and_inputs_are_refused_by_name():
    a = csr_layer(1)
    u = rigl()
    with pytest.raises(coppice.Error, match=r"add_layer: param of layer 'a' must be a sparse coppice.Tensor .*"
                                            r"got ndarray"):
        u.add_layer("a", a.to_dense().numpy())
    with pytest.raises(coppice.Error, match=r"param of layer 'a' must be a sparse coppice.Tensor, got a dense one"):
        u.add_layer("a", a.to_dense())
    u.add_layer("a", a)
    with pytest.raises(coppice.Error, match=r"layer 'a' is already added"):
        u.add_layer("a", a)
    u.add_layer("b", csr_layer(2))
    g = np.zeros(SHAPE, np.float32)
    with pytest.raises(coppice.Error, match=r"PatternUpdater.update: inputs has no entry for layer 'b'"):
        u.update(0, {"a": {"param": a, "gradient": g}})
    with pytest.raises(coppice.Error, match=r"PatternUpdater.update: no layer 'c'; layers: a, b"):
        u.update(0, {"a": {"param": a}, "b": {"param": a}, "c": {"param": a}})
    with pytest.raises(coppice.Error, match=r"inputs\['a'\] has key 'grad'; known: param, gradient, momentum"):
        u.update(0, {"a": {"param": a, "grad": g}, "b": {"param": a}})
    with pytest.raises(coppice.Error, match=r"inputs\['a'\] has no 'param'"):
        u.update(0, {"a": {"gradient": g}, "b": {"param": a}})
    with pytest.raises(coppice.Error, match=r"inputs\['a'\]\['gradient'\] must have the parameter's shape "
                                            r"\[16, 24\], got \[24, 16\]"):
        u.update(0, {"a": {"param": a, "gradient": g.T}, "b": {"param": a}})
    with pytest.raises(coppice.Error, match=r"inputs\['a'\]\['param'\] must be a sparse coppice.Tensor"):
        u.update(0, {"a": {"param": g}, "b": {"param": a}})
    with pytest.raises(coppice.Error, match=r"inputs must be a dict of layer name"):
        u.update(0, [a])
    # RigL's update steps need every layer's gradient; checked before any layer changes.
    with pytest.raises(coppice.Error, match=r"layer b, step 0.*growth 'gradient'.*expected the dense gradient of "
                                            r"shape \[16, 24\], got none"):
        u.update(0, {"a": {"param": a, "gradient": g}, "b": {"param": a}})
    bad = g.copy()
    bad[3, 4] = np.nan
    with pytest.raises(coppice.Error, match=r"layer a, step 0.*non-finite"):
        u.update(0, {"a": {"param": a, "gradient": bad}, "b": {"param": a, "gradient": g}})
    with pytest.raises(coppice.Error, match=r"PatternUpdater.itop_rate: no layer 'c'; layers: a, b"):
        u.itop_rate("c")


# ---- GMP ----------------------------------------------------------------------------------------


def test_gmp_density_at_follows_the_cubic_schedule():
    kw = dict(start_step=10, end_step=110, initial_density=1.0, final_density=0.1)
    expected = {0: 1.0, 10: 1.0, 35: 1 - (0.9 - 0.9 * 0.75 ** 3), 60: 1 - (0.9 - 0.9 * 0.125), 110: 0.1, 500: 0.1}
    for step, density in expected.items():
        assert optim.gmp_density_at(step, **kw) == pytest.approx(density, rel=1e-12, abs=1e-15)
    # From 0.5 to 0.2: s_i = 0.5, s_f = 0.8; half way s = 0.8 + (0.5 - 0.8) / 8.
    assert optim.gmp_density_at(50, end_step=100, initial_density=0.5, final_density=0.2) == pytest.approx(
        1 - (0.8 - 0.3 / 8), rel=1e-12)
    assert optim.gmp_density_at(7, start_step=7, end_step=7) == 0.1  # equal steps: final from start on
    with pytest.raises(coppice.Error, match=r"gmp: final_density \(0.5\) is above initial_density \(0.4\)"):
        optim.gmp_density_at(0, end_step=10, initial_density=0.4, final_density=0.5)
    with pytest.raises(coppice.Error, match=r"gmp: frequency must be >= 1, got 0"):
        optim.gmp_density_at(0, end_step=10, frequency=0)
    with pytest.raises(TypeError):
        optim.gmp_density_at(0, 10)  # the schedule's keywords are keywords only


def test_gmp_pruner_prunes_to_the_scheduled_density():
    p = optim.GmpPruner(start_step=0, end_step=35, frequency=10, final_density=0.1)
    assert [s for s in range(50) if p.is_prune_step(s)] == [0, 10, 20, 30, 35]
    assert p.density_at(20) == optim.gmp_density_at(20, start_step=0, end_step=35, final_density=0.1)
    a = csr_layer(1, density=0.5)
    same, keep_from = p.prune(5, a)
    assert keep_from is None and same.nnz == a.nnz
    new, keep_from = p.prune(35, a)
    keep = round(0.1 * a.numel())
    assert new.nnz == keep
    kept, dropped, grown = check_change(a, new, keep_from)
    assert not grown and (keep_from.numpy() >= 0).all()
    w = np.abs(a.to_dense().numpy().reshape(-1))
    stored = np.flatnonzero(slot_of_position(a).reshape(-1) >= 0)
    assert kept == set(stored[np.argsort(-w[stored], kind="stable")[:keep]].tolist())


def test_prune_to_density_on_csr_and_bsr():
    a = csr_layer(2, density=0.5)
    new, keep_from = optim.prune_to_density(a, 0.2)
    assert new.nnz == round(0.2 * a.numel())
    check_change(a, new, keep_from)
    same, none = optim.prune_to_density(a, 0.9)  # nothing needs to go
    assert none is None and same.nnz == a.nnz
    b = bsr_layer(3)
    new, keep_from = optim.prune_to_density(b, 0.1)
    assert new.format == "bsr" and new.nnz == 16 * round(0.1 * 24)
    kept, _, grown = check_change(b, new, keep_from)
    assert not grown
    with pytest.raises(coppice.Error, match=r"prune_to_density: density must be in \[0, 1\], got 1.5"):
        optim.prune_to_density(a, 1.5)
    with pytest.raises(coppice.Error, match=r"prune_to_density: param must be a sparse coppice.Tensor"):
        optim.prune_to_density(np.ones(SHAPE, np.float32), 0.5)


# ---- n:m ---------------------------------------------------------------------------------------


def nm_reference(w, n, m):
    """The n of largest |w| in each group of m along the last dim, ties to the lower index."""
    groups = np.abs(w).reshape(-1, m)
    mask = np.zeros(groups.shape, bool)
    order = np.argsort(-groups, axis=1, kind="stable")[:, :n]
    np.put_along_axis(mask, order, True, axis=1)
    return mask.reshape(w.shape)


def transposable_reference(w, n, m):
    """Per m x m tile, among the patterns with n per row and per column, the largest kept sum of |w|; ties to the
    first pattern, rows' choices listed lexicographically, patterns ordered by row 0's choice, then row 1's, ..."""
    choices = list(itertools.combinations(range(m), n))
    patterns = []
    for rows in itertools.product(choices, repeat=m):
        p = np.zeros((m, m), bool)
        for r, cols in enumerate(rows):
            p[r, list(cols)] = True
        if (p.sum(axis=0) == n).all():
            patterns.append(p)
    mask = np.zeros(w.shape, bool)
    for i in range(0, w.shape[0], m):
        for j in range(0, w.shape[1], m):
            tile = np.abs(w[i:i + m, j:j + m]).astype(np.float64)
            sums = [tile[p].sum() for p in patterns]
            mask[i:i + m, j:j + m] = patterns[int(np.argmax(sums))]  # argmax: the first of the largest
    return mask


@pytest.mark.parametrize("n,m", [(2, 4), (1, 4), (3, 8), (4, 4)])
def test_nm_mask_matches_numpy_with_ties(n, m):
    rng = np.random.default_rng(n * 10 + m)
    # Small integers with both signs: many ties of |w|, which go to the lower index.
    w = rng.integers(-3, 4, (3, 8, 16)).astype(np.float32)
    w[0, 0, :m] = 1.0  # a group all tied
    w[0, 1, :m] = 0.0  # a group all zero
    mask = coppice.nm_mask(w, n, m)
    assert mask.dtype == "bool" and mask.shape == list(w.shape)
    np.testing.assert_array_equal(mask.numpy(), nm_reference(w, n, m))
    np.testing.assert_array_equal(coppice.nm_mask(coppice.tensor(w.astype(np.float64)), n, m).numpy(),
                                  nm_reference(w, n, m))


def test_transposable_nm_mask_matches_numpy_with_ties():
    rng = np.random.default_rng(1)
    w = rng.integers(-2, 3, (8, 12)).astype(np.float32)
    w[:4, :4] = 0.0  # an all-zero tile keeps the first pattern
    mask = coppice.nm_mask(w, 2, 4, transposable=True).numpy()
    np.testing.assert_array_equal(mask, transposable_reference(w, 2, 4))
    assert (mask.reshape(2, 4, 3, 4).sum(axis=1) == 2).all() and (mask.reshape(8, 3, 4).sum(axis=2) == 2).all()
    np.testing.assert_array_equal(mask[:4, :4], [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]])


def test_nm_mask_refuses_by_name():
    w = np.ones((4, 8), np.float32)
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask"):
        coppice.nm_mask(np.ones((4, 6), np.float32), 2, 4)  # 4 does not divide 6
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask"):
        coppice.nm_mask(w, 5, 4)
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask: weight must be a dense floating tensor, got csr f32"):
        coppice.nm_mask(coppice.tensor(w).to_format("csr"), 2, 4)
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask: weight must be a dense floating tensor, got dense i64"):
        coppice.nm_mask(np.ones((4, 8), np.int64), 2, 4)
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask: a transposable mask needs m <= 4 and a 2-D weight"):
        coppice.nm_mask(np.ones((6, 8), np.float32), 2, 4, transposable=True)
    bad = w.copy()
    bad[1, 2] = np.inf
    with pytest.raises(coppice.Error, match=r"coppice.nm_mask: the weight holds non-finite values"):
        coppice.nm_mask(bad, 2, 4)
