"""coppice.propagate (python/bind_propagation.cc): sparsity attributes propagated through one traced forward pass
of a model. A relu MLP's hidden outputs become the next linears' CSR inputs by the rule written by hand for them,
the model trains the same with either, the plan lists every tensor, and the errors name what is wrong."""
import json

import numpy as np
import pytest

import coppice
from coppice import nn


def mlp():
    return nn.make_model("mlp", sizes=[8, 16, 12, 4], seed=3)


def batch(n=6, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)


def test_relu_outputs_become_csr_inputs_and_train_as_written_by_hand():
    inferred = mlp()
    result = coppice.propagate(inferred, batch(), max_density=1.0)
    assert [r["module"] for r in result["rules"]] == ["fc1", "fc2"]
    assert "linear(csr, dense) on cpu" in result["rules"][0]["reason"]
    inferred.apply_sparsity(result["schedule"])

    by_hand = mlp()
    written = coppice.SparsityBuilder()
    for name in ("fc1", "fc2"):
        written.output(name).forward("threshold", "csr", threshold=0)
    by_hand.apply_sparsity(written)

    x = batch(10, seed=2)
    np.testing.assert_array_equal(inferred(x).numpy(), by_hand(x).numpy())


def test_the_plan_lists_every_tensor():
    model = mlp()
    lines = [json.loads(l) for l in coppice.propagate(model, batch(), max_density=1.0)["plan"].splitlines()]
    header, rest = lines[0], lines[1:]
    tensors = [l for l in rest if "tensor" in l]
    assert header["tensors"] == len(tensors) and header["rules"] == 2
    names = {t["name"] for t in tensors}
    assert {"input", "fc1.weight", "fc1.bias", "fc3.weight"} <= names
    fc1 = next(t for t in tensors if t["rule"] == "fc1")
    assert fc1["forward"] == "dense, zero where <= 0, >= 0" and fc1["format"] == "csr"
    assert 0 < fc1["density"] < 1
    assert model.training, "the trace gives the training mode back"


def test_max_density_and_errors():
    x = batch()
    assert coppice.propagate(mlp(), x, max_density=0.01)["rules"] == []
    by_default = coppice.propagate(mlp(), x)  # max_density 0.1: relu outputs at half density stay dense
    assert by_default["rules"] == []
    left = [json.loads(l)["left_dense"] for l in by_default["plan"].splitlines() if '"left_dense": "0.' in l]
    assert len(left) == 2 and all("above max_density 0.1" in why for why in left)
    with pytest.raises(coppice.Error, match=r"propagate: max_density must be in \(0, 1\], got 0"):
        coppice.propagate(mlp(), x, max_density=0)
    with pytest.raises(coppice.Error, match="tpu"):
        coppice.propagate(mlp(), x, device="tpu")
