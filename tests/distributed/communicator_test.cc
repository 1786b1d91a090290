// Tests for distributed/communicator.h: the call descriptions, the checks
// every backend shares, and the Work handle.
#include "distributed/communicator.h"

#include <string>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

TEST(CommunicatorTest, Names) {
  EXPECT_EQ(reduce_op_name(ReduceOp::kSum), "sum");
  EXPECT_EQ(reduce_op_name(ReduceOp::kAverage), "average");
  EXPECT_EQ(reduce_op_name(ReduceOp::kMax), "max");
  EXPECT_EQ(collective_name(Collective::kAllReduce), "all_reduce");
  EXPECT_EQ(collective_name(Collective::kAllGatherV), "all_gather_v");
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(collective_name(Collective::kBarrier), "barrier");
}

TEST(CommunicatorTest, CallText) {
  Tensor t = zeros({2, 3});
  EXPECT_EQ(check_collective(Collective::kAllReduce, t, ReduceOp::kAverage, 0, 2).to_string(),
            "all_reduce(average) f32 [2, 3]");
  EXPECT_EQ(check_collective(Collective::kBroadcast, zeros({4}, DType::kI64), ReduceOp::kSum, 1, 2).to_string(),
            "broadcast(root 1) i64 [4]");
  EXPECT_EQ(check_collective(Collective::kAllGather, t, ReduceOp::kSum, 0, 2).to_string(), "all_gather f32 [2, 3]");
  EXPECT_EQ(check_collective(Collective::kBarrier, Tensor(), ReduceOp::kSum, 0, 2).to_string(), "barrier");
}

TEST(CommunicatorTest, LocalChecks) {
  EXPECT_ERROR_NAMING(check_collective(Collective::kAllReduce, Tensor(), ReduceOp::kSum, 0, 2), "all_reduce");
  EXPECT_ERROR_NAMING(check_collective(Collective::kAllReduce, zeros({2, 3}).t(), ReduceOp::kSum, 0, 2),
                      "all_reduce: works in place and needs a contiguous tensor");
  EXPECT_ERROR_NAMING(check_collective(Collective::kAllReduce, zeros({2}, DType::kI32), ReduceOp::kAverage, 0, 2),
                      "all_reduce(average): needs a floating dtype, got i32");
  EXPECT_ERROR_NAMING(check_collective(Collective::kReduceScatter, zeros({2}, DType::kBool), ReduceOp::kMax, 0, 2),
                      "reduce_scatter(max): bool tensors cannot be reduced");
  EXPECT_ERROR_NAMING(check_collective(Collective::kReduceScatter, zeros({3, 2}), ReduceOp::kSum, 0, 2),
                      "reduce_scatter: dim 0 of [3, 2] does not split into 2 equal chunks");
  EXPECT_ERROR_NAMING(check_collective(Collective::kBroadcast, zeros({3}), ReduceOp::kSum, 2, 2),
                      "broadcast: root 2 is not a rank of a world of size 2");
  EXPECT_ERROR_NAMING(check_collective(Collective::kAllGather, scalar_tensor(1.0), ReduceOp::kSum, 0, 2),
                      "all_gather: needs a tensor of at least 1 dim");
  // Out-of-place collectives take strided inputs; data movement takes bool.
  EXPECT_NO_THROW(check_collective(Collective::kAllGather, zeros({2, 3}).t(), ReduceOp::kSum, 0, 2));
  EXPECT_NO_THROW(check_collective(Collective::kBroadcast, zeros({3}, DType::kBool), ReduceOp::kSum, 0, 2));
  EXPECT_NO_THROW(check_collective(Collective::kAllReduce, zeros({0}, DType::kU8), ReduceOp::kMax, 0, 2));
}

TEST(CommunicatorTest, Mismatch) {
  auto call = [](Collective c, Shape shape, DType dtype = DType::kF32, ReduceOp op = ReduceOp::kSum, int root = 0) {
    return check_collective(c, zeros(shape, dtype), op, root, 4);
  };
  EXPECT_EQ(collective_mismatch(call(Collective::kAllReduce, {2}), call(Collective::kAllReduce, {2})), "");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllReduce, {2}), call(Collective::kAllGather, {2})), "op");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllReduce, {2}), call(Collective::kAllReduce, {3})), "shape");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllReduce, {2}), call(Collective::kAllReduce, {2}, DType::kF64)),
            "dtype");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllReduce, {2}),
                                call(Collective::kAllReduce, {2}, DType::kF32, ReduceOp::kMax)),
            "reduce op");
  EXPECT_EQ(collective_mismatch(call(Collective::kBroadcast, {2}),
                                call(Collective::kBroadcast, {2}, DType::kF32, ReduceOp::kSum, 1)),
            "root");
  // all_gather_v: dim 0 may differ, the rest may not.
  EXPECT_EQ(collective_mismatch(call(Collective::kAllGatherV, {2, 3}), call(Collective::kAllGatherV, {0, 3})), "");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllGatherV, {2, 3}), call(Collective::kAllGatherV, {2, 4})), "shape");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllGatherV, {2, 3}), call(Collective::kAllGatherV, {6})), "shape");
  EXPECT_EQ(collective_mismatch(call(Collective::kAllGather, {2, 3}), call(Collective::kAllGather, {0, 3})), "shape");
}

TEST(CommunicatorTest, UndefinedWork) {
  Work w;
  EXPECT_FALSE(w.defined());
  EXPECT_ERROR_NAMING(w.wait(), "undefined Work");
}

}  // namespace
}  // namespace coppice
