#include "data/dataset.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "data/permutation.h"
#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Example i: input [i, 10 i], target i.
std::shared_ptr<TensorDataset> counting(int64_t n) {
  Tensor idx = arange(n, DType::kF32);
  Tensor inputs = stack({idx, mul(idx, 10.0)}, 1);
  return std::make_shared<TensorDataset>(inputs, arange(n));
}

TEST(TensorDataset, GetBatch) {
  auto ds = counting(6);
  EXPECT_EQ(ds->size(), 6);
  Batch b = ds->get_batch({4, 1, 4});
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.inputs.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.inputs.to_vector<double>(), (std::vector<double>{4, 40, 1, 10, 4, 40}));
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{4, 1, 4}));
  EXPECT_EQ(b.indices, (std::vector<int64_t>{4, 1, 4}));
  EXPECT_EQ(b.to(Device::cpu()).inputs.device(), Device::cpu());
}

TEST(TensorDataset, Misuse) {
  auto ds = counting(3);
  EXPECT_THROW(ds->get_batch({0, 3}), Error);
  EXPECT_THROW(ds->get_batch({-1}), Error);
  try {
    ds->get_batch({3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 3 (position 0) is out of range [0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TensorDataset(zeros({3, 2}), zeros({4})), Error);
  EXPECT_THROW(TensorDataset(scalar_tensor(1.0), scalar_tensor(1.0)), Error);
  EXPECT_THROW(TensorDataset(Tensor(), zeros({1})), Error);
}

TEST(Subset, MapsIndices) {
  auto base = counting(10);
  SubsetDataset sub(base, {7, 2, 5});
  EXPECT_EQ(sub.size(), 3);
  Batch b = sub.get_batch({2, 0});
  EXPECT_EQ(b.targets.to_vector<int64_t>(), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(b.indices, (std::vector<int64_t>{2, 0}));
  EXPECT_THROW(sub.get_batch({3}), Error);
  EXPECT_THROW(SubsetDataset(base, {10}), Error);
  EXPECT_THROW(SubsetDataset(nullptr, {}), Error);
}

std::vector<int64_t> targets_of(const Dataset& ds) {
  std::vector<int64_t> all(static_cast<size_t>(ds.size()));
  std::iota(all.begin(), all.end(), int64_t{0});
  return ds.get_batch(all).targets.to_vector<int64_t>();
}

TEST(Split, Last) {
  TrainValidation s = split_last(counting(10), 3);
  EXPECT_EQ(targets_of(*s.train), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(targets_of(*s.validation), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(split_last(counting(4), 0).validation->size(), 0);
  EXPECT_EQ(split_last(counting(4), 4).train->size(), 0);
  EXPECT_THROW(split_last(counting(4), 5), Error);
  EXPECT_THROW(split_last(counting(4), -1), Error);
}

TEST(Split, RandomIsSeededDisjointAndComplete) {
  auto ds = counting(100);
  TrainValidation a = split_random(ds, 20, 7);
  TrainValidation b = split_random(ds, 20, 7);
  TrainValidation c = split_random(ds, 20, 8);
  std::vector<int64_t> va = targets_of(*a.validation), ta = targets_of(*a.train);
  EXPECT_EQ(va.size(), 20u);
  EXPECT_EQ(ta.size(), 80u);
  EXPECT_EQ(va, targets_of(*b.validation));
  EXPECT_NE(va, targets_of(*c.validation));
  EXPECT_TRUE(std::is_sorted(va.begin(), va.end()));
  std::set<int64_t> all(va.begin(), va.end());
  all.insert(ta.begin(), ta.end());
  EXPECT_EQ(all.size(), 100u);
  EXPECT_NE(va, (std::vector<int64_t>{80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99}));
  EXPECT_THROW(split_random(ds, 101, 0), Error);
}

TEST(Permutation, IsAPermutationAndSeeded) {
  for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
    std::vector<int64_t> p = keyed_permutation(n, 1, kShufflePurpose, 0);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), int64_t{0});
    EXPECT_EQ(sorted, iota) << n;
    EXPECT_EQ(p, keyed_permutation(n, 1, kShufflePurpose, 0));
  }
  EXPECT_NE(keyed_permutation(50, 1, kShufflePurpose, 0), keyed_permutation(50, 1, kShufflePurpose, 1));
  EXPECT_NE(keyed_permutation(50, 1, kShufflePurpose, 0), keyed_permutation(50, 2, kShufflePurpose, 0));
  EXPECT_NE(keyed_permutation(50, 1, kShufflePurpose, 0), keyed_permutation(50, 1, kSplitPurpose, 0));
  // A generator advances: two draws differ.
  Generator g(5);
  EXPECT_NE(random_permutation(50, g), random_permutation(50, g));
  EXPECT_EQ(g.offset(), 2u);
  EXPECT_THROW(random_permutation(-1, g), Error);
}

TEST(Permutation, RoughlyUniform) {
  // Over 6000 keyed permutations of 3, each of the 6 orders appears ~1000 times,
  // and over 2000 of 10, each value lands at position 0 ~200 times.
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t e = 0; e < 6000; ++e) ++counts[keyed_permutation(3, 42, kShufflePurpose, e)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& kv : counts) EXPECT_NEAR(kv.second, 1000, 120);
  std::vector<int> first(10, 0);
  for (uint64_t e = 0; e < 2000; ++e) ++first[static_cast<size_t>(keyed_permutation(10, 3, kShufflePurpose, e)[0])];
  for (int c : first) EXPECT_NEAR(c, 200, 60);
}

}  // namespace
}  // namespace coppice
