"""einsum, rearrange and one_hot from Python: any mix of formats, gradients, Scorch's mixture-of-experts
slide as it is written, the plan, and errors that name what is wrong."""
import os

import numpy as np
import pytest

import coppice
from conftest import REPO

RNG = np.random.default_rng(7)


def test_scorch_moe_slide_written_literally():
    B, N, D_in, D_out = 6, 3, 4, 5
    x0 = RNG.standard_normal((B, D_in))
    E0 = RNG.standard_normal((N, D_in, D_out))
    chosen = RNG.random((B, N)).argmax(1)

    x = coppice.Variable(x0.copy(), requires_grad=True)
    E = coppice.Variable(E0.copy(), requires_grad=True)
    gates = coppice.one_hot(chosen, N, dtype="f64")  # a sparse CSR [B, N]
    assert gates.format == "csr"
    x_dispatch = coppice.rearrange(x, "bd->bnd", n=N)
    y_experts = coppice.einsum("bnd,ndh->bnh", x_dispatch, E)
    y = coppice.einsum("bnd,bn->bd", y_experts, gates)

    want = np.stack([x0[b] @ E0[chosen[b]] for b in range(B)])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)
    g = RNG.standard_normal((B, D_out))
    coppice.sum(y * g).backward()
    want_dx = np.stack([g[b] @ E0[chosen[b]].T for b in range(B)])
    want_dE = np.zeros_like(E0)
    for b in range(B):
        want_dE[chosen[b]] += np.outer(x0[b], g[b])
    np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(E.grad.numpy(), want_dE, rtol=1e-12, atol=1e-12)


def test_a_sparse_weight_gets_its_gradient_in_its_format():
    dense = RNG.standard_normal((4, 8)) * (RNG.random((4, 8)) < 0.5)
    w = coppice.Variable(coppice.tensor(dense).to_format("csr"), requires_grad=True)
    x = RNG.standard_normal((5, 8))
    y = coppice.einsum("bj,ij->bi", x, w)
    np.testing.assert_allclose(y.numpy(), x @ dense.T, rtol=1e-12, atol=1e-12)
    coppice.sum(y).backward()
    assert w.grad.format == "csr"
    assert any("sparse_linear" in line for line in coppice.einsum_plan("bj,ij->bi", x, w.data))


def test_tensors_in_give_a_tensor_out():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    out = coppice.einsum("ij,jk->ik", coppice.tensor(a), coppice.tensor(b))
    assert isinstance(out, coppice.Tensor)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12)


def test_rearrange_dense_and_sparse():
    x = RNG.standard_normal((2, 6))
    np.testing.assert_allclose(coppice.rearrange(coppice.tensor(x), "b (h d) -> b h d", h=3).numpy(),
                               x.reshape(2, 3, 2))
    s = coppice.tensor(x * (x > 0)).to_format("coo")
    t = coppice.rearrange(s, "i j -> j i")
    assert t.format == "csr"
    np.testing.assert_allclose(t.to_dense().numpy(), (x * (x > 0)).T)


def test_errors_name_the_problem():
    with pytest.raises(coppice.Error, match="label 'j' has size 3 in operand 0 and 4 in operand 1"):
        coppice.einsum("ij,jk->ik", np.zeros((2, 3)), np.zeros((4, 5)))
    with pytest.raises(coppice.Error, match="the new axis 'n' needs its size"):
        coppice.rearrange(np.zeros((2, 3)), "b d -> b n d")
    with pytest.raises(coppice.Error, match="index 4 at flat position 1"):
        coppice.one_hot(np.array([0, 4]), 3)


def test_routed_attention_blocks_and_a_routed_gpt_job(tmp_path):
    # Query block 3 points at key block 1: besides the diagonal and block 0, top-1 routing keeps it.
    q = np.zeros((1, 8, 1, 2), np.float32)
    k = np.zeros((1, 8, 1, 2), np.float32)
    q[0, 4:, 0, 0] = 1.0
    k[0, 2:4, 0, 0] = 1.0
    k[0, 4:6, 0, 0] = -1.0
    keep = coppice.routed_blocks(q, k, block=2, window=1, top_k=1)
    assert keep.shape == (4, 4) and keep[3].tolist() == [True, True, False, True]
    # A GPT job whose attention is routed, from Python.
    s = coppice.train(os.path.join(REPO, "configs", "gpt_dense.yaml"), overrides=[
        "device=cpu", "model.options.dim=32", "model.options.layers=1", "model.options.heads=2",
        "model.options.context=32", "model.options.attention=routed", "model.options.block=8",
        "model.options.routed_top_k=1", "data.seq_len=32", "data.stride=32",
        "data.path=/usr/share/doc/linux-doc-6.1/html/_sources/RCU", "precision.dtype=f32",
        "lr_schedule.warmup_steps=2", "evaluation.every_steps=5", f"checkpoint.dir={tmp_path}/ck",
        "checkpoint.every_steps=5", f"logging.metrics={tmp_path}/m.jsonl"], max_steps=5)
    assert s["final_step"] == 5


def test_embedding_bag_and_row_sparse_gradients():
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((10, 4))
    idx = np.array([1, 3, 3, 0, 7, 9])
    offsets = np.array([0, 2, 2, 5])  # bags [1, 3], [], [3, 0, 7], [9]
    w = coppice.Variable(w0.copy(), requires_grad=True)
    y = coppice.embedding_bag(w, idx, offsets, mode="sum", sparse_grad=True)
    want = np.stack([w0[[1, 3]].sum(0), np.zeros(4), w0[[3, 0, 7]].sum(0), w0[9]])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12)
    coppice.sum(y).backward()
    assert w.grad.format == "bsr"  # row-sparse: the rows used
    dense_grad = np.zeros_like(w0)
    np.add.at(dense_grad, idx, 1.0)
    np.testing.assert_allclose(w.grad.to_dense().numpy(), dense_grad)
    m = coppice.embedding_bag(coppice.tensor(w0), idx, offsets, mode="mean", padding_idx=3)
    np.testing.assert_allclose(m.numpy()[2], w0[[0, 7]].mean(0), rtol=1e-12)
    # max: each column's largest; its gradient to that entry's row alone.
    wm = coppice.Variable(w0.copy(), requires_grad=True)
    mx = coppice.embedding_bag(wm, idx, offsets, mode="max")
    np.testing.assert_array_equal(mx.numpy()[2], w0[[3, 0, 7]].max(0))
    np.testing.assert_array_equal(mx.numpy()[1], np.zeros(4))  # an empty bag
    coppice.sum(mx).backward()
    want_grad = np.zeros_like(w0)
    for bag in ([1, 3], [3, 0, 7], [9]):
        for c in range(4):
            want_grad[bag[int(np.argmax(w0[bag, c]))], c] += 1.0
    np.testing.assert_array_equal(wm.grad.numpy(), want_grad)
    with pytest.raises(coppice.Error, match="mode must be 'sum', 'mean' or 'max'"):
        coppice.embedding_bag(w0, idx, offsets, mode="min")


def test_adagrad_steps_only_the_rows_an_embedding_used():
    rng = np.random.default_rng(6)
    w0 = rng.standard_normal((8, 3))
    w = coppice.Variable(w0.copy(), requires_grad=True)
    opt = coppice.optim.Adagrad([w], lr=0.5, initial_accumulator_value=0.1)
    coppice.sum(coppice.embedding(w, np.array([2, 5, 2]), sparse_grad=True)).backward()
    assert w.grad.format == "bsr"
    opt.step()
    got = w.numpy()
    g = np.zeros_like(w0)
    np.add.at(g, [2, 5, 2], 1.0)
    want = w0 - 0.5 * g / (np.sqrt(0.1 + g * g) + 1e-10)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    untouched = [0, 1, 3, 4, 6, 7]
    np.testing.assert_array_equal(got[untouched], w0[untouched])
