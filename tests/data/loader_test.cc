#include "data/loader.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "data/permutation.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Example i: input [i, -i] (f32), target i (i64).
std::shared_ptr<TensorDataset> counting(int64_t n) {
  Tensor idx = arange(n, DType::kF32);
  return std::make_shared<TensorDataset>(stack({idx, neg(idx)}, 1), arange(n));
}

// All batches of one epoch, as their targets.
std::vector<std::vector<int64_t>> epoch_targets(const DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& b : loader.epoch(epoch)) {
    EXPECT_EQ(b.inputs.size(0), b.size());
    EXPECT_EQ(b.targets.to_vector<int64_t>(), b.indices);
    // Inputs travel with their targets.
    std::vector<double> in = b.inputs.to_vector<double>();
    for (int64_t r = 0; r < b.size(); ++r) {
      EXPECT_EQ(in[static_cast<size_t>(2 * r)], static_cast<double>(b.indices[static_cast<size_t>(r)]));
    }
    out.push_back(b.indices);
  }
  EXPECT_EQ(static_cast<int64_t>(out.size()), loader.num_batches());
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(DataLoader, SequentialBatches) {
  DataLoaderOptions o;
  o.batch_size = 4;
  DataLoader loader(counting(10), o);
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<std::vector<int64_t>> want = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  EXPECT_EQ(epoch_targets(loader, 0), want);
  EXPECT_EQ(epoch_targets(loader, 5), want);  // no shuffle: every epoch alike
  EXPECT_EQ(loader.batch(0, 2).indices, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(loader.batch(0, 2).inputs.device(), Device::cpu());

  o.drop_last = true;
  DataLoader dropping(counting(10), o);
  EXPECT_EQ(dropping.num_batches(), 2);
  EXPECT_EQ(epoch_targets(dropping, 0), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_THROW(dropping.batch(0, 2), Error);
}

TEST(DataLoader, ShuffleIsDeterministicPerSeedAndEpoch) {
  DataLoaderOptions o;
  o.batch_size = 7;
  o.shuffle = true;
  o.seed = 1234;
  DataLoader a(counting(100), o), b(counting(100), o);
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(epoch_targets(a, e), epoch_targets(b, e)) << e;
  // The same loader gives the same epoch twice; epochs differ from each other and from the identity.
  EXPECT_EQ(epoch_targets(a, 1), epoch_targets(a, 1));
  std::vector<int64_t> e0 = flat(epoch_targets(a, 0)), e1 = flat(epoch_targets(a, 1));
  EXPECT_NE(e0, e1);
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_NE(e0, identity);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);  // every example once
  EXPECT_EQ(e0, a.epoch_order(0));
  EXPECT_EQ(e0, keyed_permutation(100, 1234, kShufflePurpose, 0));
  // Another seed, another order.
  o.seed = 1235;
  EXPECT_NE(flat(epoch_targets(DataLoader(counting(100), o), 0)), e0);
  // Random access agrees with iteration.
  EXPECT_EQ(a.batch(2, 3).indices, epoch_targets(a, 2)[3]);
}

TEST(DataLoader, PinnedOrder) {
  // The first epoch of seed 0 over 10 examples, pinned so that a change to the
  // stream (which would change every run's data order) is noticed.
  DataLoaderOptions o;
  o.batch_size = 10;
  o.shuffle = true;
  DataLoader loader(counting(10), o);
  std::vector<int64_t> order = loader.epoch_order(0);
  EXPECT_EQ(order, (std::vector<int64_t>{5, 0, 9, 6, 8, 3, 7, 1, 4, 2}));
  EXPECT_EQ(loader.batch(0, 0).indices, order);
}

// Shards of every rank for one epoch.
std::vector<std::vector<int64_t>> shards(int64_t n, int64_t world, ShardRemainder rem, int64_t epoch,
                                         int64_t batch_size = 3) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < world; ++r) {
    DataLoaderOptions o;
    o.batch_size = batch_size;
    o.shuffle = true;
    o.seed = 99;
    o.rank = r;
    o.world_size = world;
    o.remainder = rem;
    DataLoader loader(counting(n), o);
    std::vector<int64_t> s = flat(epoch_targets(loader, epoch));
    EXPECT_EQ(s, loader.shard_indices(epoch));
    EXPECT_EQ(static_cast<int64_t>(s.size()), loader.shard_size());
    out.push_back(s);
  }
  return out;
}

TEST(DataLoader, ShardsPartitionTheEpoch) {
  for (int64_t world : {1, 2, 4}) {
    for (int64_t epoch : {0, 1}) {
      std::vector<std::vector<int64_t>> s = shards(100, world, ShardRemainder::kPad, epoch);
      std::multiset<int64_t> all;
      for (const auto& shard : s) {
        EXPECT_EQ(static_cast<int64_t>(shard.size()), 100 / world);
        all.insert(shard.begin(), shard.end());
      }
      std::vector<int64_t> got(all.begin(), all.end()), want(100);
      std::iota(want.begin(), want.end(), int64_t{0});
      EXPECT_EQ(got, want) << "world " << world << " epoch " << epoch;  // disjoint, and the union is the epoch
    }
  }
  // Rank r takes entries r, r + W, ... of the epoch's order.
  DataLoaderOptions o;
  o.shuffle = true;
  o.seed = 99;
  o.rank = 1;
  o.world_size = 4;
  DataLoader loader(counting(100), o);
  std::vector<int64_t> order = loader.epoch_order(3), shard = loader.shard_indices(3);
  for (size_t i = 0; i < shard.size(); ++i) EXPECT_EQ(shard[i], order[1 + 4 * i]);
}

TEST(DataLoader, UnevenShardsPadOrDrop) {
  // 10 examples on 4 ranks: padding gives 3 each (12 = the epoch plus its first
  // 2 entries repeated); dropping gives 2 each (the last 2 entries unseen).
  std::vector<std::vector<int64_t>> pad = shards(10, 4, ShardRemainder::kPad, 0, 2);
  std::vector<std::vector<int64_t>> drop = shards(10, 4, ShardRemainder::kDrop, 0, 2);
  DataLoaderOptions o;
  o.shuffle = true;
  o.seed = 99;
  std::vector<int64_t> order = DataLoader(counting(10), o).epoch_order(0);
  std::multiset<int64_t> padded, dropped;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(pad[static_cast<size_t>(r)].size(), 3u);
    EXPECT_EQ(drop[static_cast<size_t>(r)].size(), 2u);
    padded.insert(pad[static_cast<size_t>(r)].begin(), pad[static_cast<size_t>(r)].end());
    dropped.insert(drop[static_cast<size_t>(r)].begin(), drop[static_cast<size_t>(r)].end());
  }
  std::multiset<int64_t> want_pad(order.begin(), order.end());
  want_pad.insert(order[0]);
  want_pad.insert(order[1]);
  EXPECT_EQ(padded, want_pad);
  EXPECT_EQ(dropped, std::multiset<int64_t>(order.begin(), order.begin() + 8));
  // More ranks than examples: padding repeats the order cyclically.
  std::vector<std::vector<int64_t>> tiny = shards(2, 5, ShardRemainder::kPad, 0, 1);
  for (const auto& s : tiny) EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(shards(2, 5, ShardRemainder::kDrop, 0, 1)[0].size(), 0u);
}

TEST(DataLoader, Misuse) {
  DataLoaderOptions o;
  o.batch_size = 0;
  EXPECT_THROW(DataLoader(counting(3), o), Error);
  o.batch_size = 1;
  o.world_size = 2;
  o.rank = 2;
  EXPECT_THROW(DataLoader(counting(3), o), Error);
  o.rank = -1;
  EXPECT_THROW(DataLoader(counting(3), o), Error);
  o.rank = 0;
  o.world_size = 0;
  EXPECT_THROW(DataLoader(counting(3), o), Error);
  EXPECT_THROW(DataLoader(nullptr, DataLoaderOptions()), Error);
  DataLoader ok(counting(3), DataLoaderOptions());
  EXPECT_THROW(ok.epoch_order(-1), Error);
}

TEST(DataLoader, BatchesOnTheChosenDevice) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA): batches stay on the CPU here";
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  DataLoader cpu(counting(10), o);
  o.device = Device::cuda(0);
  DataLoader gpu(counting(10), o);
  Batch b = gpu.batch(0, 1);
  EXPECT_EQ(b.inputs.device(), Device::cuda(0));
  EXPECT_EQ(b.targets.device(), Device::cuda(0));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), cpu.batch(0, 1).targets.to_vector<int64_t>());
  EXPECT_TRUE(allclose(b.inputs.to(Device::cpu()), cpu.batch(0, 1).inputs));
}

TEST(DataLoader, EmptyDataset) {
  DataLoader loader(counting(0), DataLoaderOptions());
  EXPECT_EQ(loader.num_batches(), 0);
  int n = 0;
  for (const Batch& b : loader.epoch(0)) n += static_cast<int>(b.size());
  EXPECT_EQ(n, 0);
}

TEST(DataLoader, IndicesFromOutsideNeverReadPastTheShard) {
  DataLoaderOptions o;
  o.batch_size = 2;
  DataLoader loader(counting(5), o);  // batches [0, 1], [2, 3], [4]
  EXPECT_EQ(loader.batch(0, 2).size(), 1);
  // A batch index such as a checkpoint's trainer.batch: refused, not read before or past the shard.
  for (int64_t index :
       {int64_t{-1}, int64_t{3}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    try {
      loader.batch(0, index);
      ADD_FAILURE() << index;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DataLoader: batch index " + std::to_string(index) + " is outside [0, 3)"),
                std::string::npos)
          << e.what();
    }
  }
  auto shard = std::make_shared<const std::vector<int64_t>>(loader.shard_indices(0));
  EXPECT_THROW(DataLoader::Iterator(&loader, shard, -1), Error);
  // Shard and batch counts of huge world and batch sizes do not overflow.
  o.batch_size = std::numeric_limits<int64_t>::max();
  o.world_size = std::numeric_limits<int64_t>::max();
  DataLoader huge(counting(5), o);
  EXPECT_EQ(huge.shard_size(), 1);
  EXPECT_EQ(huge.num_batches(), 1);
}

// Sparse inputs (a bag of words): every batch's inputs are its rows as a
// CSR, equal to the dense rows, shuffled with their targets; a 3-D sparse
// input is refused naming the shape.
TEST(DataLoader, SparseInputsBatchAsCsrRows) {
  Generator gen(3);
  const Tensor dense = mul(randn({20, 12}, DType::kF32, gen), lt(rand({20, 12}, DType::kF32, gen), 0.3));
  for (const std::string format : {"csr", "coo", "bsr"}) {
    SCOPED_TRACE(format);
    const FormatOptions o = format == "bsr" ? FormatOptions::block(2) : FormatOptions{};
    auto data = std::make_shared<TensorDataset>(sparse_from_mask(dense, ne(dense, 0.0), format, o), arange(20));
    DataLoaderOptions lo;
    lo.batch_size = 6;
    lo.shuffle = true;
    lo.seed = 5;
    DataLoader loader(data, lo);
    int64_t seen = 0;
    for (const Batch& b : loader.epoch(0)) {
      EXPECT_EQ(b.inputs.format(), "csr");
      EXPECT_EQ(b.targets.to_vector<int64_t>(), b.indices);
      const Tensor want = index_select(dense, 0, from_vector(b.indices));
      EXPECT_TRUE(allclose(to_dense(b.inputs), want, 0, 0));
      seen += b.size();
    }
    EXPECT_EQ(seen, 20);
  }
  const Tensor cube = sparse_from_mask(ones({2, 2, 2}), ones({2, 2, 2}, DType::kBool), "coo");
  try {
    TensorDataset bad(cube, arange(2));
    ADD_FAILURE() << "a 3-D sparse input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("sparse inputs must be a matrix [examples, features], got coo of shape [2, 2, 2]"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace coppice
