"""coppice.data: TensorDataset and DataLoader (data/loader.h) from Python: batches, shuffling keyed by seed and epoch,
drop_last, sequences of (x, y) pairs, and errors."""
import numpy as np
import pytest

import coppice
from coppice.data import DataLoader, TensorDataset


def dataset(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return x, y


def test_batches_in_order():
    x, y = dataset(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[1].numpy().tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for xb, yb in batches:
        assert isinstance(xb, coppice.Tensor) and isinstance(yb, coppice.Tensor)
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])
    assert xb.dtype == "f32" and yb.dtype == "i64"


def test_drop_last():
    x, y = dataset(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert [b[1].numpy().tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_is_a_permutation_per_epoch_and_deterministic_by_seed():
    x, y = dataset(50)
    a = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, seed=3)
    b = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, seed=3)
    c = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, seed=4)
    epochs_a = [np.concatenate([yb.numpy() for _, yb in a]) for _ in range(3)]  # each `for` is the next epoch
    epochs_b = [np.concatenate([yb.numpy() for _, yb in b]) for _ in range(3)]
    assert a.epoch == 3
    for e in range(3):
        assert sorted(epochs_a[e].tolist()) == list(range(50))
        np.testing.assert_array_equal(epochs_a[e], epochs_b[e])  # same seed, same order
        np.testing.assert_array_equal(epochs_a[e], a.indices(e))
    assert not np.array_equal(epochs_a[0], epochs_a[1])  # a new order each epoch
    assert not np.array_equal(epochs_a[0], np.concatenate([yb.numpy() for _, yb in c]))  # another seed
    # Resuming: set_epoch picks the epoch the next iteration runs; epoch_batches reads one without counting.
    b.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate([yb.numpy() for _, yb in b]), epochs_a[1])
    np.testing.assert_array_equal(np.concatenate([yb.numpy() for _, yb in a.epoch_batches(2)]), epochs_a[2])
    assert a.epoch == 3


def test_sequence_of_pairs():
    rng = np.random.default_rng(0)
    pairs = [(rng.standard_normal((2, 2)), i % 3) for i in range(7)]
    loader = DataLoader(pairs, batch_size=3, shuffle=True, seed=1)
    seen = []
    for xb, yb in loader:
        assert xb.numpy().shape[1:] == (2, 2)
        for xi, yi in zip(xb.numpy(), yb.numpy()):
            match = [i for i, (px, py) in enumerate(pairs) if np.array_equal(px, xi)]
            assert len(match) == 1 and pairs[match[0]][1] == yi
            seen.append(match[0])
    assert sorted(seen) == list(range(7))
    assert len(loader.dataset) == 7


def test_training_with_the_loader():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((256, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    coppice.manual_seed(0)
    model = coppice.nn.Sequential(coppice.nn.Linear(4, 16), coppice.nn.ReLU(), coppice.nn.Linear(16, 2))
    opt = coppice.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, seed=0)
    for _ in range(5):
        for xb, yb in loader:
            loss = coppice.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with coppice.no_grad():
        assert (coppice.argmax(model(x), 1).numpy() == y).mean() > 0.9


def test_bad_arguments():
    x, y = dataset(10)
    with pytest.raises(coppice.Error, match="DataLoader: batch_size must be >= 1, got 0"):
        DataLoader(TensorDataset(x, y), batch_size=0)
    with pytest.raises(coppice.Error, match="DataLoader: dataset must be a coppice.data.Dataset or a sequence"):
        DataLoader(5)
    with pytest.raises(coppice.Error, match=r"DataLoader: dataset\[1\] must be an \(x, y\) pair"):
        DataLoader([(1.0, 2), (1.0,)])
    with pytest.raises(coppice.Error, match="DataLoader: the dataset's xs do not stack"):
        DataLoader([(np.zeros(2), 0), (np.zeros(3), 1)])
    with pytest.raises(coppice.Error, match="DataLoader: the dataset is empty"):
        DataLoader([])
    with pytest.raises(coppice.Error, match="TensorDataset"):
        TensorDataset(x, y[:5])  # first dimensions differ


def test_sparse_inputs_batch_as_csr_rows():
    rng = np.random.default_rng(4)
    dense = (rng.standard_normal((30, 8)) * (rng.random((30, 8)) < 0.3)).astype(np.float32)
    data = coppice.data.TensorDataset(coppice.tensor(dense).to_format("csr"), np.arange(30))
    seen = []
    for x, y in coppice.data.DataLoader(data, batch_size=7, shuffle=True, seed=1):
        assert x.format == "csr"
        np.testing.assert_array_equal(x.to_dense().numpy(), dense[y.numpy()])
        seen += list(y.numpy())
    assert sorted(seen) == list(range(30))
