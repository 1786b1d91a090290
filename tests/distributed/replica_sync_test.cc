// Tests for distributed/replica_sync.h on the in-process backend (1, 2 and 4
// ranks): broadcast_any for dense tensors and every sparse format (same
// pattern: values in place; another pattern: a new tensor equal to the
// root's), mismatches named on every rank, pattern checksums, the pattern
// agreement check and scalar reductions.
#include "distributed/replica_sync.h"

#include <string>
#include <vector>

#include "distributed/inproc_communicator.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

const std::vector<std::string> kFormats = {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};

// A [4, 8] f32 tensor of `format`: values from `values_seed`, pattern from
// `pattern_seed` (n:m keeps 2 of every 4 by magnitude, so its pattern follows
// the values; blocked formats use 2x2 blocks).
Tensor make(const std::string& format, uint64_t pattern_seed, uint64_t values_seed) {
  Generator values_gen(values_seed), pattern_gen(pattern_seed);
  Tensor dense = randn({4, 8}, DType::kF32, values_gen);
  if (format == "dense") return dense;
  Tensor mask = lt(rand({4, 8}, DType::kF32, pattern_gen), 0.5);
  if (format == "nm") return nm_compress(mul(dense, add(rand({4, 8}, DType::kF32, pattern_gen), 0.5)), 2, 4);
  if (format == "masked") return sparse_masked(dense, mask);
  const bool blocked = format == "bsr" || format == "blocked_ell";
  return sparse_from_mask(dense, mask, format, blocked ? FormatOptions::block(2) : FormatOptions{});
}

class ReplicaSyncTest : public ::testing::TestWithParam<int> {
 protected:
  int world() const { return GetParam(); }
};

TEST_P(ReplicaSyncTest, BroadcastDenseInPlace) {
  run_inproc(world(), [&](Communicator& comm) {
    const int root = comm.world_size() - 1;
    Tensor t = full({2, 3}, comm.rank(), DType::kF64);
    Tensor got = broadcast_any(comm, t, root, "w");
    EXPECT_TRUE(got.is_same(t));
    EXPECT_EQ(max_abs_diff(t, full({2, 3}, root, DType::kF64)), 0.0);
    // Not contiguous: still in place.
    Tensor base = full({3, 2}, comm.rank(), DType::kF32);
    Tensor view = base.t();
    EXPECT_TRUE(broadcast_any(comm, view, 0, "view").is_same(view));
    EXPECT_EQ(max_abs_diff(base, zeros({3, 2})), 0.0);
  });
}

TEST_P(ReplicaSyncTest, BroadcastSparseSamePatternSendsValuesInPlace) {
  for (const std::string& format : kFormats) {
    if (format == "nm") continue;  // n:m's pattern follows its values (covered below)
    run_inproc(world(), [&](Communicator& comm) {
      Tensor t = make(format, /*pattern_seed=*/1, /*values_seed=*/10 + comm.rank());
      const uint64_t version = pattern_version(t);
      Tensor got = broadcast_any(comm, t, 0, "w");
      EXPECT_TRUE(got.is_same(t)) << format;
      EXPECT_EQ(pattern_version(got), version) << format;
      EXPECT_EQ(max_abs_diff(to_dense(t), to_dense(make(format, 1, 10))), 0.0) << format;
    });
  }
}

TEST_P(ReplicaSyncTest, BroadcastSparseOtherPatternMakesTheRootsTensor) {
  for (const std::string& format : kFormats) {
    run_inproc(world(), [&](Communicator& comm) {
      const int root = 0;
      // Rank 1 holds another pattern (and other values); the others hold the root's pattern.
      const bool other = comm.rank() == 1;
      Tensor t = make(format, other ? 2 : 1, other ? 20 : 10 + comm.rank());
      const Tensor want = make(format, 1, 10);
      Tensor got = broadcast_any(comm, t, root, "layer.weight");
      EXPECT_EQ(got.format(), format);
      EXPECT_EQ(got.shape(), want.shape());
      EXPECT_EQ(max_abs_diff(to_dense(got), to_dense(want)), 0.0) << format << " rank " << comm.rank();
      EXPECT_EQ(pattern_fingerprint(got), pattern_fingerprint(want)) << format;
      if (other) {
        EXPECT_FALSE(got.is_same(t)) << format;
      } else if (format != "nm") {  // n:m patterns follow values: only the root's matches
        EXPECT_TRUE(got.is_same(t)) << format << " rank " << comm.rank();
      }
    });
  }
}

TEST_P(ReplicaSyncTest, BroadcastMismatchIsNamedOnEveryRank) {
  if (world() == 1) return;
  run_inproc(world(), [&](Communicator& comm) {
    Tensor t = comm.rank() == 1 ? sparse_from_mask(ones({4, 6}), lt(rand({4, 6}), 0.5), "csr") : make("csr", 1, 1);
    EXPECT_TRUE(testing::throws_with(
        [&] { broadcast_any(comm, t, 0, "fc.weight"); },
        {"broadcast_any('fc.weight')", "rank 1 holds csr f32 [4, 6]", "rank 0, holds csr f32 [4, 8]"}));
  });
  run_inproc(world(), [&](Communicator& comm) {
    Tensor t = make(comm.rank() == 1 ? "coo" : "csr", 1, 1);
    EXPECT_TRUE(testing::throws_with([&] { broadcast_any(comm, t, 0, "w"); }, {"rank 1 holds coo", "holds csr"}));
  });
}

TEST(ReplicaSyncChecksumTest, PatternChecksum) {
  const Tensor crow = from_vector<int32_t>({0, 2, 3}), col = from_vector<int32_t>({0, 2, 1});
  const Tensor a = sparse_csr(crow, col, from_vector<float>({1, 2, 3}), {2, 3});
  const Tensor same_pattern = sparse_csr(crow.clone(), col.clone(), from_vector<float>({4, 5, 6}), {2, 3});
  const Tensor one_index_moved =
      sparse_csr(crow, from_vector<int32_t>({0, 1, 1}), from_vector<float>({1, 2, 3}), {2, 3});
  EXPECT_EQ(pattern_fingerprint(a), pattern_fingerprint(same_pattern));
  EXPECT_NE(pattern_fingerprint(a), pattern_fingerprint(one_index_moved));
  EXPECT_NE(pattern_fingerprint(a), pattern_fingerprint(sparse_csr(crow, col, from_vector<float>({1, 2, 3}), {2, 4})));
  EXPECT_NE(pattern_fingerprint(a), pattern_fingerprint(to_format(a, "coo")));
  // Dense: the shape alone.
  EXPECT_EQ(pattern_fingerprint(zeros({2, 3})), pattern_fingerprint(ones({2, 3}, DType::kF64)));
  EXPECT_NE(pattern_fingerprint(zeros({2, 3})), pattern_fingerprint(zeros({3, 2})));
  for (const std::string& format : kFormats) {
    if (format == "nm") continue;
    EXPECT_EQ(pattern_fingerprint(make(format, 1, 1)), pattern_fingerprint(make(format, 1, 2))) << format;
    EXPECT_NE(pattern_fingerprint(make(format, 1, 1)), pattern_fingerprint(make(format, 2, 1))) << format;
  }
}

TEST_P(ReplicaSyncTest, CheckPatternsAgree) {
  run_inproc(world(), [&](Communicator& comm) {
    std::map<std::string, Tensor> tensors = {
        {"a", make("csr", 1, comm.rank())}, {"b", make("bsr", 1, comm.rank())}, {"c", zeros({3})}};
    check_patterns_agree(comm, tensors, "mask update at step 300");  // values may differ
    if (comm.world_size() == 1) return;
    // Odd ranks drifted on "b".
    if (comm.rank() % 2 == 1) tensors["b"] = make("bsr", 2, 0);
    std::string odd_ranks = comm.world_size() == 4 ? "rank(s) 1, 3" : "rank(s) 1 ";
    EXPECT_TRUE(testing::throws_with([&] { check_patterns_agree(comm, tensors, "mask update at step 300"); },
                                     {"mask update at step 300", "'b'", odd_ranks}));
    // Different tensors.
    std::map<std::string, Tensor> fewer = {{"a", make("csr", 1, 0)}};
    if (comm.rank() == 0) fewer["z"] = zeros({1});
    EXPECT_TRUE(
        testing::throws_with([&] { check_patterns_agree(comm, fewer, "step 7"); }, {"step 7", "different tensors"}));
  });
}

TEST_P(ReplicaSyncTest, AllReduceScalars) {
  run_inproc(world(), [&](Communicator& comm) {
    const double r = comm.rank();
    const std::vector<double> mine = {r, 2 * r + 1, -r};
    const double n = comm.world_size();
    const double sum_r = n * (n - 1) / 2;
    EXPECT_EQ(all_reduce_scalars(comm, mine), (std::vector<double>{sum_r, 2 * sum_r + n, -sum_r}));
    std::vector<double> avg = all_reduce_scalars(comm, mine, ReduceOp::kAverage);
    EXPECT_DOUBLE_EQ(avg[0], sum_r / n);
    EXPECT_DOUBLE_EQ(avg[1], (2 * sum_r + n) / n);
    EXPECT_EQ(all_reduce_scalars(comm, mine, ReduceOp::kMax), (std::vector<double>{n - 1, 2 * (n - 1) + 1, 0}));
    EXPECT_TRUE(all_reduce_scalars(comm, {}).empty());
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ReplicaSyncTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace coppice
