"""Learning-rate schedules (coppice.optim.LrScheduler and the schedules of optim/lr_schedule.h) against their closed
forms and against the trainer's own schedule for the same job settings; optimizer state_dict()/load_state_dict():
a training loop stopped and resumed from a state dict continues bit for bit, and bad state is refused by name."""
import json
import math
import os

import numpy as np
import pytest

import coppice
from coppice import nn, optim

from conftest import tiny_job


def lrs_of(schedule, steps, lr=0.1, momentum=0.0):
    """The lr an SGD optimizer has at each of `steps` steps under LrScheduler(schedule)."""
    w = coppice.Variable(np.zeros(2), requires_grad=True)
    opt = optim.SGD([w], lr=lr, momentum=momentum)
    sched = optim.LrScheduler(opt, schedule)
    out = []
    for _ in range(steps):
        out.append(opt.option("lr"))
        assert sched.lr == opt.option("lr") == sched.get_last_lr()[0]
        sched.step()
    return out


def test_closed_forms():
    n = 40
    assert lrs_of(optim.constant_lr(), n) == [0.1] * n
    np.testing.assert_allclose(lrs_of(optim.step_lr(step_size=7, gamma=0.5), n),
                               [0.1 * 0.5 ** (t // 7) for t in range(n)], rtol=1e-15)
    np.testing.assert_allclose(lrs_of(optim.cosine_lr(t_max=30, eta_min=0.001), n),
                               [0.001 + 0.099 * (1 + math.cos(math.pi * t / 30)) / 2 for t in range(n)], rtol=1e-14)
    warm = optim.linear_warmup(warmup_steps=5, start_factor=0.2, then=optim.cosine_lr(t_max=20))
    want = [0.1 * (0.2 + 0.8 * t / 5) if t < 5 else 0.1 * (1 + math.cos(math.pi * (t - 5) / 20)) / 2 for t in range(n)]
    np.testing.assert_allclose(lrs_of(warm, n), want, rtol=1e-14, atol=1e-17)
    ramp = optim.linear_ramp(start_step=10, ramp_steps=4, inner=optim.constant_lr())
    np.testing.assert_allclose(lrs_of(ramp, 16), [0.1] * 10 + [0.025, 0.05, 0.075, 0.1] + [0.1] * 2, rtol=1e-15)
    assert "cosine_lr(t_max=20" in repr(warm)


def test_scheduler_step_set_step_and_groups():
    a = coppice.Variable(np.zeros(1), requires_grad=True)
    b = coppice.Variable(np.zeros(1), requires_grad=True)
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    sched = optim.LrScheduler(opt, optim.step_lr(step_size=2, gamma=0.1))
    assert sched.base_lrs == [0.1, 0.5] and sched.current_step == 0
    for _ in range(4):
        sched.step()
    assert sched.current_step == 4
    np.testing.assert_allclose(sched.get_last_lr(), [0.001, 0.005], rtol=1e-14)
    sched.set_step(1)
    assert sched.get_last_lr() == [0.1, 0.5] and opt.option("lr", group=1) == 0.5
    saved = sched.state_dict()
    assert saved == {"step": 1}
    sched.set_step(9)
    sched.load_state_dict(saved)
    assert sched.current_step == 1 and sched.get_last_lr() == [0.1, 0.5]
    with pytest.raises(coppice.Error, match="cosine_lr: t_max must be positive"):
        optim.cosine_lr(t_max=0)
    with pytest.raises(coppice.Error, match="LrScheduler: optimizer must be a coppice.optim one"):
        optim.LrScheduler(object(), optim.constant_lr())


SETTINGS = [
    # (lr_schedule section, mask_update section, the same schedule built in Python)
    ({"name": "cosine", "t_max": 50, "eta_min": 0.001}, {},
     lambda: optim.cosine_lr(t_max=50, eta_min=0.001)),
    ({"name": "cosine", "eta_min": 0.002, "warmup_steps": 10, "warmup_start_factor": 0.1}, {},
     lambda: optim.linear_warmup(10, 0.1, optim.cosine_lr(t_max=90, eta_min=0.002))),  # t_max 0: steps - warm-up
    ({"name": "step", "step_size": 15, "gamma": 0.5, "warmup_steps": 4, "warmup_start_factor": 0.5}, {},
     lambda: optim.linear_warmup(4, 0.5, optim.step_lr(15, 0.5))),
    ({"name": "constant"}, {},
     lambda: optim.constant_lr()),
    ({"name": "cosine"}, {"method": "static", "densify_step": 60, "densify_warmup_steps": 8},
     lambda: optim.linear_ramp(60, 8, optim.cosine_lr(t_max=100))),
]


@pytest.mark.parametrize("section,mask_update,python_schedule", SETTINGS)
def test_python_schedule_equals_the_trainers(section, mask_update, python_schedule):
    job = tiny_job(**mask_update)
    job["training"]["steps"] = 100
    job["lr_schedule"] = section
    trainer_schedule = optim.job_lr_schedule(job)  # train/job.h's job_lr_schedule for this job
    mine = lrs_of(python_schedule(), 100, lr=0.05)
    assert mine == [trainer_schedule.lr(0.05, t) for t in range(100)]  # bit for bit
    assert lrs_of(trainer_schedule, 100, lr=0.05) == mine


def test_scheduler_matches_the_lrs_a_trainer_run_records(tmp_path):
    """The lrs coppice.train's trainer records at each step (metrics.jsonl) are the Python scheduler's."""
    job = tiny_job()
    job["training"]["steps"] = 40
    job["lr_schedule"] = {"name": "cosine", "eta_min": 0.001, "warmup_steps": 5, "warmup_start_factor": 0.2}
    job["logging"] = {"metrics": str(tmp_path / "metrics.jsonl"), "every_steps": 1, "progress": False}
    coppice.train(job)
    records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    recorded = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert len(recorded) >= 39
    mine = lrs_of(optim.linear_warmup(5, 0.2, optim.cosine_lr(t_max=35, eta_min=0.001)), 41, lr=0.05)
    for step, lr in recorded.items():  # record `step`: the lr after the scheduler's step()s of steps 1..step
        assert lr == pytest.approx(mine[step], rel=1e-12), step


# ---- optimizer state ------------------------------------------------------------------------------------------------

RNG = np.random.default_rng(3)
U, V = RNG.standard_normal((2, 16))
X = RNG.standard_normal((512, 16)).astype(np.float32)
Y = ((X @ U > 0) ^ (X @ V > 0)).astype(np.int64)


def make_model(sparse):
    coppice.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    if sparse:
        rules = coppice.SparsityBuilder()
        rules["2.weight"].format("csr").density(0.25)
        model.apply_sparsity(rules, seed=1)
    return model


OPTIMIZERS = {
    "sgd": lambda params: optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4),
    "sgd_nesterov": lambda params: optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda params: optim.Adam(params, lr=0.01),
    "adamw": lambda params: optim.AdamW(params, lr=0.01, weight_decay=0.05),
}


def train_steps(model, opt, sched, steps, start):
    losses = []
    for step in range(start, start + steps):
        i = step * 32 % len(X)
        loss = coppice.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def snapshot(model):
    """Copies of the model's parameters; a sparse one keeps its format and pattern (its values copied)."""
    return {name: coppice.tensor(t.numpy().copy()) if t.format == "dense"
            else coppice.with_values(t, coppice.values(t).numpy().copy())
            for name, t in model.state_dict().items()}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_resume_from_state_dict_is_bit_identical(kind, sparse):
    n = 24
    model = make_model(sparse)
    opt = OPTIMIZERS[kind](model.parameters())
    straight = train_steps(model, opt, optim.LrScheduler(opt, optim.cosine_lr(t_max=n)), n, 0)

    model = make_model(sparse)
    opt = OPTIMIZERS[kind](model.parameters())
    sched = optim.LrScheduler(opt, optim.cosine_lr(t_max=n))
    first = train_steps(model, opt, sched, n // 2, 0)
    saved_model, saved_opt, saved_sched = snapshot(model), opt.state_dict(), sched.state_dict()
    before = {k: {s: (v.numpy().copy() if isinstance(v, coppice.Tensor) else v) for s, v in e.items()}
              for k, e in saved_opt["state"].items()}
    train_steps(model, opt, sched, 3, n // 2)  # the original goes on: the state dict holds copies
    for k, e in saved_opt["state"].items():
        for s, v in e.items():
            assert np.array_equal(v.numpy(), before[k][s]) if isinstance(v, coppice.Tensor) else v == before[k][s]

    # A fresh process would start here: a new model and optimizer, then the saved state.
    resumed_model = make_model(sparse)
    resumed_model.load_state_dict(saved_model)
    resumed_opt = OPTIMIZERS[kind](resumed_model.parameters())
    resumed_sched = optim.LrScheduler(resumed_opt, optim.cosine_lr(t_max=n))
    resumed_opt.load_state_dict(saved_opt)
    resumed_sched.load_state_dict(saved_sched)
    second = train_steps(resumed_model, resumed_opt, resumed_sched, n - n // 2, n // 2)
    assert first + second == straight  # bit for bit
    if sparse:
        w = resumed_model.parameter("2.weight")
        assert w.data.format == "csr" and w.name == "2.weight"  # apply_sparsity names the sparse weight
        state = resumed_opt.state_dict()["state"]
        assert all(t.numpy().shape == (w.data.nnz,) for t in state["2.weight"].values()
                   if isinstance(t, coppice.Tensor))  # compact: nnz-sized


def test_state_dict_layout_and_names():
    model = make_model(sparse=False)
    for name, p in model.named_parameters():
        p.name = name  # named parameters are kept by name (as in checkpoints)
    opt = optim.Adam(model.parameters(), lr=0.01)
    sd = opt.state_dict()
    assert sd["optimizer"] == "adam" and sd["state"] == {}  # no step yet
    assert sd["param_groups"][0]["params"] == [n for n, _ in model.named_parameters()]
    assert sd["param_groups"][0]["lr"] == 0.01 and sd["param_groups"][0]["beta2"] == 0.999
    train_steps(model, opt, optim.LrScheduler(opt, optim.constant_lr()), 2, 0)
    sd = opt.state_dict()
    entry = sd["state"]["0.weight"]
    assert entry["step"] == 2 and set(entry) == {"step", "exp_avg", "exp_avg_sq"}
    assert entry["exp_avg"].numpy().shape == (64, 16)
    np.testing.assert_array_equal(entry["exp_avg"].numpy(), opt.state(model.parameter("0.weight"))["exp_avg"].numpy())
    # NumPy arrays are taken for Tensors, and hyperparameters come back with the state.
    sd["state"]["0.weight"] = {k: (v.numpy() if k != "step" else v) for k, v in entry.items()}
    sd["param_groups"][0]["lr"] = 0.125
    other = optim.Adam(model.parameters(), lr=0.5)
    other.load_state_dict(sd)
    assert other.option("lr") == 0.125
    assert other.state(model.parameter("0.weight"))["step"] == 2


def test_bad_state_is_refused_by_name():
    model = make_model(sparse=False)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_steps(model, opt, optim.LrScheduler(opt, optim.constant_lr()), 1, 0)
    good = opt.state_dict()
    who = "coppice.optim.SGD.load_state_dict"

    def refused(sd, message):
        before = opt.state(model.parameters()[0])["momentum_buffer"].numpy().copy()
        with pytest.raises(coppice.Error, match=message):
            opt.load_state_dict(sd)
        np.testing.assert_array_equal(opt.state(model.parameters()[0])["momentum_buffer"].numpy(), before)

    refused([], rf"{who}: state_dict must be a dict")
    refused({"optimizer": "sgd", "state": {}}, rf"{who}: state_dict has no 'param_groups'")
    refused(optim.Adam(model.parameters()).state_dict(), "the state is of optimizer 'adam', not 'sgd'")
    bad = dict(good, param_groups=[dict(good["param_groups"][0], beta1=0.9)])
    refused(bad, r"state_dict\['param_groups'\]\[0\] has hyperparameter 'beta1', which sgd does not have")
    bad = dict(good, param_groups=[dict(good["param_groups"][0], lr="fast")])
    refused(bad, r"state_dict\['param_groups'\]\[0\]\['lr'\] must be a number, got str")
    bad = dict(good, state=dict(good["state"], **{"group.0.param.0": {"step": 1, "momentum_buffer": np.zeros(3)}}))
    refused(bad, r"'group.0.param.0.momentum_buffer' has shape \[3\] but the parameter's values have shape \[64, 16\]")
    bad = dict(good, state=dict(good["state"], **{"group.0.param.0": {"step": "1"}}))
    refused(bad, r"state_dict\['state'\]\['group.0.param.0'\]\['step'\] must be an int, got str")
    bad = dict(good, state=dict(good["state"], **{"group.0.param.0": {"step": 1, "momentum_buffer": [[1], [2, 3]]}}))
    refused(bad, r"state_dict\['state'\]\['group.0.param.0'\]\['momentum_buffer'\]")
    bad = dict(good, state=dict(good["state"], nonsense={"step": 1, "momentum_buffer": np.zeros(3, np.float32)}))
    refused(bad, "tensor 'nonsense.momentum_buffer' belongs to no parameter state")
    other = make_model(sparse=False)
    refused(dict(good, param_groups=[dict(good["param_groups"][0], params=["a"])]),
            "group 0 has 1 parameters in the state, 6 in the optimizer")
    # Unnamed parameters keep no name after the call.
    assert all(p.name == "" for p in model.parameters())
    del other
