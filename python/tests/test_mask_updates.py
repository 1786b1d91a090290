"""Mask updates keep the model's Variables (issue 34): after MaskUpdater.update the parameters a user holds, those of
model.parameters() / named_parameters() and those in the optimizer's param_groups are the same objects, with the new
pattern and values; the optimizer goes on without being rebuilt, and its steps give the bits of rebuilding model,
optimizer and updater from their state dicts after every update. MaskUpdater.state_dict / load_state_dict: a RigL loop
stopped and resumed through coppice.save / coppice.load continues bit for bit; bad state is refused by name."""
import json

import numpy as np
import pytest

import coppice
from coppice import nn, optim

RNG = np.random.default_rng(5)
U, V = RNG.standard_normal((2, 16))
X = RNG.standard_normal((512, 16)).astype(np.float32)
Y = ((X @ U > 0) ^ (X @ V > 0)).astype(np.int64)
LAYERS = ("0.weight", "2.weight")
GROWTH = {"rigl": "gradient", "set": "random"}
OPTIMIZERS = {
    "sgd": lambda params: optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda params: optim.Adam(params, lr=0.01),
}


def make_model(fmt):
    """An MLP whose two hidden weights are sparse at about 25 % (CSR entries, or BSR 4x4 blocks), named as the
    trainer names them."""
    coppice.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
    rng = np.random.default_rng(1)
    for name in LAYERS:
        w = model.parameter(name).numpy().copy()
        if fmt == "csr":
            t = coppice.sparse_from_mask(w, rng.random(w.shape) < 0.25, "csr")
        else:
            blocks = rng.random((w.shape[0] // 4, w.shape[1] // 4)) < 0.25
            blocks[0, 0] = True
            t = coppice.sparse_from_mask(w, np.kron(blocks, np.ones((4, 4), bool)), "bsr", block_rows=4, block_cols=4)
        model.set_parameter(name, coppice.Variable(t, requires_grad=True, name=name))
    return model


def make_updater(model, opt, growth, prune="magnitude"):
    return optim.MaskUpdater(model, opt, growth=GROWTH[growth], prune=prune, end_step=16, interval=4,
                             drop_fraction=0.3)


def pattern(t):
    """The positions a sparse tensor stores, as a bool array (whatever the values, zeros included)."""
    ones = np.ones_like(coppice.values(t).numpy())
    return coppice.with_values(t, ones).to_dense().numpy() != 0


def run(model, opt, updater, start, stop, after_update=None):
    """The trainer's step order; after_update(model, opt, updater) may hand back others to go on with."""
    losses, updates = [], []
    for step in range(start, stop):
        i = step * 32 % len(X)
        updater.begin_step(step)
        loss = coppice.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
        opt.zero_grad()
        loss.backward()
        updater.after_backward()
        opt.step()
        losses.append(loss.item())
        if updater.update(step) is not None:
            updates.append(step)
            if after_update is not None:
                model, opt, updater = after_update(model, opt, updater)
    return losses, updates, (model, opt, updater)


def bits(model):
    """Every parameter as (format, dense bits, stored pattern)."""
    out = {}
    for name, t in model.state_dict().items():
        dense = t.numpy() if t.format == "dense" else t.to_dense().numpy()
        out[name] = (t.format, dense.view(np.uint32).copy(), None if t.format == "dense" else pattern(t))
    return out


def assert_same_bits(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name][0] == b[name][0], name
        np.testing.assert_array_equal(a[name][1], b[name][1], err_msg=name)
        if a[name][2] is not None:
            np.testing.assert_array_equal(a[name][2], b[name][2], err_msg=name)


# ---- the same Variables -----------------------------------------------------------------------


@pytest.mark.parametrize("growth", sorted(GROWTH))
@pytest.mark.parametrize("fmt", ["csr", "bsr"])
def test_a_mask_update_keeps_the_variables(fmt, growth):
    model = make_model(fmt)
    held = dict(model.named_parameters())
    params = model.parameters()
    opt = optim.SGD(params, lr=0.05, momentum=0.9)
    updater = make_updater(model, opt, growth)
    assert [p is held[n] for n, p in model.named_parameters()] == [True] * len(held)
    before = {n: pattern(held[n].data) for n in LAYERS}
    taken = {n: held[n].data for n in LAYERS}  # a Tensor is a value: it keeps the old pattern

    _, updates, _ = run(model, opt, updater, 0, 6)
    assert updates == [0, 4]
    for name, p in model.named_parameters():
        assert p is held[name], name
        assert model.parameter(name) is held[name], name
    group = opt.param_groups[0]["params"]
    assert len(group) == len(params) and all(a is b for a, b in zip(group, params))
    moved = 0
    for name in LAYERS:
        w = held[name]
        now = pattern(w.data)
        assert w.data.format == fmt and w.name == name and w.requires_grad
        assert now.sum() == before[name].sum()  # the same nnz
        moved += int((now != before[name]).sum())
        np.testing.assert_array_equal(pattern(taken[name]), before[name])
        np.testing.assert_array_equal(now, pattern(model.state_dict()[name]))
        state = opt.state(w)  # found by the held Variable: the optimizer's own
        assert state["momentum_buffer"].numpy().size == coppice.values(w.data).numpy().size
    assert moved > 0, "no update moved a mask"
    # The held Variables train on: their values change at the next step, in their new patterns.
    after = {n: held[n].data.to_dense().numpy().copy() for n in LAYERS}
    run(model, opt, updater, 6, 7)
    for name in LAYERS:
        assert not np.array_equal(held[name].data.to_dense().numpy(), after[name]), name


def test_the_update_clears_gradients_and_stale_graphs_are_refused():
    model = make_model("csr")
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    updater = make_updater(model, opt, "set")
    w = model.parameter("0.weight")
    updater.begin_step(0)
    loss = coppice.cross_entropy(model(X[:32]), Y[:32])
    opt.zero_grad()
    loss.backward(retain_graph=True)
    updater.after_backward()
    opt.step()
    assert updater.update(0) is not None
    assert w.grad is None  # it belonged to the old pattern
    with pytest.raises(coppice.Error, match=r"'[02].weight' was given a new value .*after this graph was recorded"):
        loss.backward()  # a graph recorded before the update
    run(model, opt, updater, 1, 2)  # a new forward pass trains as usual
    assert w.grad is not None and w.grad.format == "csr"


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("growth", sorted(GROWTH))
@pytest.mark.parametrize("fmt", ["csr", "bsr"])
def test_steps_after_updates_equal_rebuilding_everything(fmt, growth, kind):
    """Kept Variables against the other way round: after every update, a new model, optimizer and updater made
    from the old ones' state dicts (what a user had to do when updates made new Variables). Bit for bit."""
    n = 18
    model = make_model(fmt)
    opt = OPTIMIZERS[kind](model.parameters())
    kept_losses, kept_updates, _ = run(model, opt, make_updater(model, opt, growth), 0, n)

    def rebuild(old_model, old_opt, old_updater):
        m = make_model(fmt)
        m.load_state_dict(old_model.state_dict())
        o = OPTIMIZERS[kind](m.parameters())
        o.load_state_dict(old_opt.state_dict())
        u = make_updater(m, o, growth)
        u.load_state_dict(old_updater.state_dict())
        return m, o, u

    other = make_model(fmt)
    other_opt = OPTIMIZERS[kind](other.parameters())
    losses, updates, (rebuilt, _, rebuilt_updater) = run(other, other_opt, make_updater(other, other_opt, growth), 0,
                                                         n, after_update=rebuild)
    assert kept_updates == updates == [0, 4, 8, 12]
    assert kept_losses == losses
    assert rebuilt is not other
    assert_same_bits(bits(model), bits(rebuilt))


# ---- MaskUpdater.state_dict and resuming ------------------------------------------------------


def save_optimizer(path, sd):
    """An optimizer's state_dict through coppice.save: its tensors as entries, the rest as JSON metadata."""
    tensors = {f"{p}.{k}": v for p, e in sd["state"].items() for k, v in e.items() if k != "step"}
    rest = {"optimizer": sd["optimizer"], "param_groups": sd["param_groups"],
            "steps": {p: e["step"] for p, e in sd["state"].items()}}
    coppice.save(path, tensors, metadata={"optimizer": json.dumps(rest)})


def load_optimizer(path):
    tensors, meta = coppice.load(path, metadata=True)
    rest = json.loads(meta["optimizer"])
    state = {p: {"step": s} for p, s in rest["steps"].items()}
    for key, t in tensors.items():
        p, k = key.rsplit(".", 1)
        state[p][k] = t
    return {"optimizer": rest["optimizer"], "param_groups": rest["param_groups"], "state": state}


@pytest.mark.parametrize("fmt,growth,prune", [("csr", "rigl", "magnitude"), ("bsr", "rigl", "magnitude"),
                                              ("csr", "set", "movement")])
def test_a_rigl_loop_resumes_bit_for_bit(tmp_path, fmt, growth, prune):
    n = 20
    model = make_model(fmt)
    opt = OPTIMIZERS["sgd"](model.parameters())
    updater = make_updater(model, opt, growth, prune)
    straight, straight_updates, _ = run(model, opt, updater, 0, n)
    straight_itop = {name: updater.itop_rate(name) for name in LAYERS}

    model = make_model(fmt)
    opt = OPTIMIZERS["sgd"](model.parameters())
    updater = make_updater(model, opt, growth, prune)
    first, first_updates, _ = run(model, opt, updater, 0, n // 2)
    state = updater.state_dict()
    assert {k for k in state if k.endswith(".ever_active")} == {f"{name}.ever_active" for name in LAYERS}
    assert any(k.endswith(".movement_scores") for k in state) == (prune == "movement")
    coppice.save(tmp_path / "model.safetensors", model.state_dict())
    save_optimizer(tmp_path / "optimizer.safetensors", opt.state_dict())
    coppice.save(tmp_path / "mask.safetensors", state)
    saved_patterns = {name: pattern(model.parameter(name).data) for name in LAYERS}
    del model, opt, updater

    # A fresh process would start here: the model's state first (its patterns), then the optimizer's and the updater's.
    resumed = make_model(fmt)
    resumed.load_state_dict(coppice.load(tmp_path / "model.safetensors"))
    resumed_opt = OPTIMIZERS["sgd"](resumed.parameters())
    resumed_opt.load_state_dict(load_optimizer(tmp_path / "optimizer.safetensors"))
    resumed_updater = make_updater(resumed, resumed_opt, growth, prune)
    resumed_updater.load_state_dict(coppice.load(tmp_path / "mask.safetensors"))
    second, second_updates, _ = run(resumed, resumed_opt, resumed_updater, n // 2, n)

    assert first_updates + second_updates == straight_updates == [0, 4, 8, 12]
    assert second_updates == [12]  # a mask update after the resume
    assert first + second == straight  # bit for bit
    assert {name: resumed_updater.itop_rate(name) for name in LAYERS} == straight_itop
    assert any((pattern(resumed.parameter(name).data) != saved_patterns[name]).any() for name in LAYERS)
    straight_model = make_model(fmt)
    straight_opt = OPTIMIZERS["sgd"](straight_model.parameters())
    run(straight_model, straight_opt, make_updater(straight_model, straight_opt, growth, prune), 0, n)
    assert_same_bits(bits(straight_model), bits(resumed))


def test_bad_updater_state_is_refused_by_name():
    model = make_model("csr")
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    updater = make_updater(model, opt, "set", prune="movement")
    run(model, opt, updater, 0, 6)
    good = updater.state_dict()
    itop = {name: updater.itop_rate(name) for name in LAYERS}
    who = "MaskUpdater.load_state_dict"
    nnz = coppice.values(model.parameter("0.weight").data).numpy().size

    def refused(sd, message):
        with pytest.raises(coppice.Error, match=message):
            updater.load_state_dict(sd)
        assert {name: updater.itop_rate(name) for name in LAYERS} == itop  # nothing changed

    refused([], rf"{who}: state_dict must be a dict of name to tensor .*got list")
    refused({1: good["0.weight.ever_active"]}, rf"{who}: a key of state_dict is int")
    refused({k: v for k, v in good.items() if k != "2.weight.ever_active"}, rf"{who}: missing '2.weight.ever_active'")
    refused(dict(good, **{"4.weight.ever_active": np.ones((2, 32), bool)}),
            rf"{who}: entry '4.weight.ever_active' belongs to no layer; layers: 0.weight, 2.weight")
    refused(dict(good, **{"0.weight.ever_active": np.ones((16, 32), bool)}),
            rf"{who}: '0.weight.ever_active' must be bool of shape \[32, 16\]")
    refused(dict(good, **{"0.weight.ever_active": np.ones((32, 16), np.float32)}),
            rf"{who}: '0.weight.ever_active' must be bool of shape \[32, 16\]")
    refused(dict(good, **{"0.weight.movement_scores": np.zeros(3, np.float32)}),
            rf"{who}: '0.weight.movement_scores' has 3 entries, the layer's parameter stores {nnz}")
    refused({k: v for k, v in good.items() if k != "0.weight.movement_steps"},
            rf"{who}: '0.weight.movement_scores' and '.movement_steps' come together")
    refused(dict(good, **{"0.weight.ever_active": [[True], [False, True]]}), rf"{who}: state_dict\['0.weight.ever_active'\]")
    # Arrays are taken for Tensors; the good state loads.
    updater.load_state_dict({k: v.numpy() for k, v in good.items()})
    assert {name: updater.itop_rate(name) for name in LAYERS} == itop
    # state_dict holds copies: the updater going on leaves an earlier dict alone.
    ever = good["0.weight.ever_active"].numpy().copy()
    run(model, opt, updater, 6, 13)
    np.testing.assert_array_equal(good["0.weight.ever_active"].numpy(), ever)
