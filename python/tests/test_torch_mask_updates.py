"""coppice.torch's mask updates: RigL, SET, SNFS and GMP on SparseLinear layers with torch optimizers.

Checked entry by entry: survivors keep their values and their optimizer state, grown entries start at zero with
zero state, each layer keeps its nn.Parameter and (prune and regrow) its nnz. Plus the LeNet-300-100 RigL loop of
examples/pytorch_rigl against the trainer's configs/lenet300_rigl_90.yaml.
"""
import importlib.util
import io
import os

import pytest

torch = pytest.importorskip("torch")

import coppice  # noqa: E402
import coppice.torch as ct  # noqa: E402
from conftest import REPO, lenet300_rigl_run  # noqa: E402


def _dense(layer, values):
    """values (the layer's values' shape) placed at the layer's pattern, as a dense [out, in] tensor."""
    return ct.functional.to_torch(coppice.kernels.with_values(layer.pattern(), ct.functional.to_coppice(values))
                                  .to_dense()).clone()


def _stored(layer):
    """Where the layer stores entries (explicit zeros included), as a bool [out, in]."""
    return _dense(layer, torch.ones_like(layer.values)) != 0


def _model(fmt, block=8):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ct.sparsify_(model, [{"name": "0", "format": fmt, "block": block, "density": 0.25},
                         {"name": "2", "format": fmt, "block": block, "density": 0.5}], criterion="random",
                 generator=torch.Generator().manual_seed(1))
    return model


def _train_step(model, opt, updater, step, x, y):
    updater.begin_step(step)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.parametrize("fmt,optimizer,method", [("csr", "sgd", "rigl"), ("bsr", "adam", "rigl"),
                                                  ("coo", "sgd", "set"), ("csr", "sgd", "snfs"),
                                                  ("nm", "adam", "rigl")])
def test_an_update_keeps_survivors_and_remaps_the_optimizer_state(fmt, optimizer, method):
    model = _model(fmt)
    layers = [model[0], model[2]]
    params = [layer.values for layer in layers]
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=0.01))
    updater = ct.MaskUpdater(model, opt, method=method, end_step=100, interval=3, drop_fraction=0.3)
    x, y = torch.randn(64, 32), torch.randint(0, 8, (64,))
    for step in range(3):  # steps 0 is an update step too: then steps 1, 2 build state
        _train_step(model, opt, updater, step, x, y)
        updater.step(step)
    keys = [k for k, v in opt.state[params[0]].items() if torch.is_tensor(v) and v.shape == params[0].shape]
    assert keys, opt.state[params[0]].keys()
    before = [(layer.dense_weight(), _stored(layer), layer.nnz,
               {k: _dense(layer, opt.state[layer.values][k]) for k in keys}) for layer in layers]
    _train_step(model, opt, updater, 3, x, y)
    # The optimizer's step, then the update: compare against the weights after the step.
    after_step = [(layer.dense_weight(), {k: _dense(layer, opt.state[layer.values][k]) for k in keys})
                  for layer in layers]
    report = updater.step(3)
    assert report["updated"]
    # Each layer keeps its nnz; SNFS moves regrowth between layers and keeps the total.
    nnz_now, nnz_before = [layer.nnz for layer in layers], [b[2] for b in before]
    assert sum(nnz_now) == sum(nnz_before) and (method == "snfs" or nnz_now == nnz_before)
    for layer, param, (_, old_mask, _, _), (w, state) in zip(layers, params, before, after_step):
        assert layer.values is param
        new_w = layer.dense_weight()
        stored_now = _stored(layer)
        kept, grown = stored_now & old_mask, stored_now & ~old_mask
        assert grown.any(), "the update grew nothing"
        assert torch.equal(new_w[kept], w[kept])
        assert torch.count_nonzero(new_w[grown]) == 0
        for k in keys:
            new_state = _dense(layer, opt.state[layer.values][k])
            assert torch.equal(new_state[kept], state[k][kept]), k
            assert torch.count_nonzero(new_state[grown]) == 0, k
        if fmt == "nm":  # 2 of every 4 along a row, still
            assert torch.equal(stored_now.view(stored_now.shape[0], -1, 4).sum(-1),
                               torch.full((stored_now.shape[0], stored_now.shape[1] // 4), 2))
    # Training goes on with the same optimizer.
    _train_step(model, opt, updater, 4, x, y)
    updater.step(4)


def test_rigl_needs_begin_step_before_the_backward():
    model = _model("csr")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    updater = ct.MaskUpdater(model, opt, method="rigl", end_step=10, interval=5)
    loss = model(torch.randn(4, 32)).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"call begin_step\(0\) before the backward pass"):
        updater.step(0)


def test_updater_errors_name_the_problem():
    model = _model("csr")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with pytest.raises(ValueError, match="method must be one of set, rigl, snfs"):
        ct.MaskUpdater(model, opt, method="grow", end_step=10)
    with pytest.raises(ValueError, match="no SparseLinear layer"):
        ct.MaskUpdater(torch.nn.Linear(2, 2), opt, end_step=10)
    with pytest.raises(ValueError, match=r"\['fc9'\] name no SparseLinear"):
        ct.MaskUpdater(model, opt, end_step=10, layers=["fc9"])
    with pytest.raises(coppice.Error, match="growth"):
        ct.MaskUpdater(model, opt, growth="no_such_policy", end_step=10)


def test_updater_state_dict_round_trips_through_torch_save():
    model = _model("csr")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    updater = ct.MaskUpdater(model, opt, method="set", end_step=100, interval=1)
    x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))
    for step in range(3):
        _train_step(model, opt, updater, step, x, y)
        updater.step(step)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "updater": updater.state_dict(), "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    other = _model("csr")
    other.load_state_dict(saved["model"])
    other_opt = torch.optim.SGD(other.parameters(), lr=0.05, momentum=0.9)
    other_opt.load_state_dict(saved["opt"])
    other_updater = ct.MaskUpdater(other, other_opt, method="set", end_step=100, interval=1)
    other_updater.load_state_dict(saved["updater"])
    assert other_updater.itop_rate("0") == updater.itop_rate("0")
    # Bit-identical resume: the next steps agree exactly.
    for step in range(3, 6):
        for m, o, u in ((model, opt, updater), (other, other_opt, other_updater)):
            torch.manual_seed(step)
            _train_step(m, o, u, step, x, y)
            u.step(step)
        assert torch.equal(model[0].dense_weight(), other[0].dense_weight())


def test_gmp_prunes_on_schedule_and_keeps_the_parameter():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64))
    ct.sparsify_(model, [{"name": "0", "format": "bsr", "block": 8, "density": 1.0}])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gmp = ct.GradualMagnitudePruning(model, opt, end_step=4, frequency=2, final_density=0.25)
    values = model[0].values
    densities = []
    for step in range(5):
        model(torch.randn(8, 32)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        report = gmp.step(step)
        if report:
            densities.append(report["0"])
    assert model[0].values is values
    assert opt.state[values]["exp_avg"].shape == values.shape
    assert densities[0] == 1.0 and densities[-1] == 0.25 and densities == sorted(densities, reverse=True)


def test_gmp_and_snfs_in_a_loop_that_holds_the_last_loss():
    """The usual loop keeps the last step's `loss`, and with it the graph's gradient accumulators, alive while
    the next forward runs; a mask update that changes a layer's number of stored entries must still give the
    next backward an accumulator of the new size (it failed: "expected shape compatible with [512]")."""
    torch.manual_seed(0)
    for density, make in ((1.0, lambda m, o: ct.GradualMagnitudePruning(m, o, end_step=4, frequency=2,
                                                                        final_density=0.25)),
                          (0.5, lambda m, o: ct.MaskUpdater(m, o, method="snfs", end_step=6, interval=2,
                                                            drop_fraction=0.5))):
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        ct.sparsify_(model, [{"regex": "[02]", "format": "csr", "density": density}])
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        updater = make(model, opt)
        sizes = set()
        for step in range(8):
            x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))
            if hasattr(updater, "begin_step"):
                updater.begin_step(step)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            assert model[2].values.grad.shape == model[2].values.shape
            opt.step()
            updater.step(step)
            sizes.add((model[0].values.numel(), model[2].values.numel()))
        assert len(sizes) > 1, f"{type(updater).__name__}: no update changed a layer's size: {sizes}"


def test_loading_a_checkpoint_of_another_density_into_a_trained_layer():
    """load_state_dict resizes the values to the checkpoint's pattern: a gradient of the old pattern, and an
    accumulator held by the last step's graph, must not reach the next backward."""
    torch.manual_seed(0)
    layers = []
    for density in (0.3, 0.7):
        m = torch.nn.Sequential(torch.nn.Linear(32, 64))
        ct.sparsify_(m, [{"name": "0", "format": "csr", "density": density}])
        layers.append(m)
    saved, model = layers
    x = torch.randn(4, 32)
    loss = model(x).sum()
    loss.backward()  # a gradient of its own pattern, and a graph still held
    model.load_state_dict(saved.state_dict())
    loss = model(x).sum()
    loss.backward()
    assert model[0].values.grad.shape == saved[0].values.shape
    torch.testing.assert_close(model(x), saved(x))


def test_lenet300_rigl_loop_matches_the_trainer():
    """issue 34's target: the PyTorch loop's test accuracy within 0.3 points of the trainer's on the same job.

    Averaged over seeds 0, 1 and 2 on both sides: one run's test accuracy moves by about 0.15 points from seed to
    seed (and from one CPU to another, whose kernels round differently and so steer RigL's choices apart), so a
    single pair differed by 0.31 points on one machine where the means differ by 0.02.
    """
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        pytest.skip("Fashion-MNIST is not installed (tools/setup installs dataset-fashion-mnist)")
    path = os.path.join(REPO, "examples", "pytorch_rigl", "lenet300_rigl.py")
    spec = importlib.util.spec_from_file_location("lenet300_rigl", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.set_num_threads(2)
    seeds = (0, 1, 2)
    ours, theirs = [], []
    for seed in seeds:
        run = example.train(epochs=20, seed=seed)
        assert abs(run["densities"]["0"] - 0.080) < 0.002 and run["densities"]["4"] == 1.0
        job = lenet300_rigl_run(seed)
        ours.append(run["test_accuracy"])
        theirs.append(job["test_accuracy"])
        print(f"lenet300 RigL 90 %, seed {seed}: coppice.torch loop {100 * ours[-1]:.2f} % in {run['seconds']} s, "
              f"trainer {100 * theirs[-1]:.2f} %")
    assert abs(sum(ours) / len(seeds) - sum(theirs) / len(seeds)) <= 0.003, (ours, theirs)


def test_growth_policy_and_prune_criterion_written_over_torch_tensors():
    seen = {}

    def grow_first(layer, step, k, candidates, weight, gradient):
        seen["types"] = (type(candidates), type(weight), type(gradient))
        seen.setdefault("layers", set()).add(layer)
        return candidates[:k]  # the lowest free positions

    def smallest_first(step, weight, values):
        return -weight.abs()  # drop the largest magnitudes: the opposite of magnitude pruning

    ct.register_growth_policy("torch_grow_first", grow_first)
    ct.register_prune_criterion("torch_drop_largest", smallest_first)
    model = _model("csr")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    updater = ct.MaskUpdater(model, opt, growth="torch_grow_first", prune="torch_drop_largest", end_step=10,
                             interval=5, drop_fraction=0.25)
    layer = model[0]
    before_mask = _stored(layer)
    _train_step(model, opt, updater, 0, torch.randn(8, 32), torch.randint(0, 8, (8,)))
    w_after_step = layer.dense_weight()
    updater.step(0)
    assert seen["types"] == (torch.Tensor, torch.Tensor, torch.Tensor) and seen["layers"] == {"0", "2"}
    after_mask = _stored(layer)
    dropped, grown = before_mask & ~after_mask, after_mask & ~before_mask
    assert dropped.any() and grown.any()
    # The dropped entries are the largest survivors of the step; the grown ones the lowest free positions.
    assert w_after_step[dropped].abs().min() >= w_after_step[before_mask & after_mask].abs().max()
    free = (~before_mask).flatten().nonzero().flatten()
    assert torch.equal(grown.flatten().nonzero().flatten(), free[:int(grown.sum())])


def test_dense_gradient_sums_micro_batches_and_shared_uses():
    """RigL ranks growth by the dense gradient of the step's whole loss: with gradient accumulation over two
    micro-batches, and a layer used twice in one forward, it is the sum of every part (it kept only the last)."""
    seen = {}

    def record(layer, step, k, candidates, weight, gradient):
        seen[layer] = gradient.clone()
        return candidates[:k]

    ct.register_growth_policy("torch_record_gradient", record)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ct.sparsify_(model, [{"name": "0", "format": "csr", "density": 0.5}])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    updater = ct.MaskUpdater(model, opt, growth="torch_record_gradient", end_step=10, interval=5, drop_fraction=0.25)
    xs = [torch.randn(4, 16) for _ in range(2)]
    dense = model[0].dense_weight().requires_grad_(True)  # the same weight, dense, for the reference
    reference = sum(torch.nn.functional.linear(torch.nn.functional.linear(x, dense, model[0].bias), dense,
                                               model[0].bias).square().sum() for x in xs)
    reference.backward()
    updater.begin_step(0)
    opt.zero_grad()
    for x in xs:  # two micro-batches, the layer applied twice in each
        model[0](model[0](x)).square().sum().backward()
    opt.step()
    updater.step(0)
    torch.testing.assert_close(seen["0"], dense.grad)


def _replicas_identical(model, world):
    """On every rank: whether every rank's two sparse layers hold the same weights (bit for bit)."""
    import torch.distributed as dist
    weights = torch.cat([model[0].dense_weight().flatten(), model[2].dense_weight().flatten()])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    return all(torch.equal(gathered[0], w) for w in gathered[1:])


def _ddp_rank(rank, world, init_file, out_file):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same model and pattern on every rank
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ct.sparsify_(model, [{"regex": "[02]", "format": "csr", "density": 0.3}])
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    updater = ct.MaskUpdater(model, opt, method="rigl", end_step=8, interval=2, drop_fraction=0.3, seed=3)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for step in range(8):
        x, y = torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)
        updater.begin_step(step)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        updater.step(step)
    same = _replicas_identical(model, world)
    if rank == 0:
        torch.save({"same": same, "itop": updater.itop_rate("0"), "density": model[0].density}, out_file)
    del ddp  # before its process group (see _ddp_gmp_rank)
    dist.destroy_process_group()


def _ddp_gmp_rank(rank, world, init_file, out_file):
    import warnings
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ct.sparsify_(model, [{"regex": "[02]", "format": "csr", "density": 1.0}])
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gmp = ct.GradualMagnitudePruning(model, opt, end_step=4, frequency=2, final_density=0.25)
    g = torch.Generator().manual_seed(100 + rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(8):
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if gmp.step(step):  # sizes changed: DDP is built again, as the guide says
                ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    same = _replicas_identical(model, world)
    if rank == 0:
        torch.save({"same": same, "density": model[0].density,
                    "warned": sum("Build it again after the update" in str(w.message) for w in caught)}, out_file)
    # DDP goes before its process group: a Reducer left to hold the last reference to a destroyed group
    # destroys it at return, and PyTorch 1.13's gloo group then deadlocks joining its threads (hung a CI run).
    del ddp
    dist.destroy_process_group()


def test_gmp_under_distributed_data_parallel_built_again_after_each_prune(tmp_path):
    """GMP changes the layers' sizes; with DDP built again after each prune (the guide's recipe) the replicas stay
    identical, and each prune under torch.distributed warns that DDP must be rebuilt."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    out = tmp_path / "result.pt"
    mp.spawn(_ddp_gmp_rank, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    result = torch.load(out)
    assert result["same"], "the replicas' weights differ"
    assert result["density"] == 0.25
    assert result["warned"] >= 2  # two layers, pruned at steps 0 (to 1.0: no change), 2 and 4


def test_rigl_under_distributed_data_parallel_keeps_replicas_identical(tmp_path):
    """Two CPU ranks (gloo), different batches: the compact gradients all-reduced by DDP, RigL's dense gradients
    averaged by the updater, so both replicas pick the same masks and hold the same weights."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    out = tmp_path / "result.pt"
    mp.spawn(_ddp_rank, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    result = torch.load(out)
    assert result["same"], "the replicas' weights differ"
    assert result["itop"] > 0.3 and abs(result["density"] - 0.3) < 0.01
