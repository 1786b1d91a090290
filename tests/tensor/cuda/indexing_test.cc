// CPU parity of index_select, gather and scatter_add, and their range checks
// (read back at the next synchronization).
#include <cuda_runtime_api.h>

#include <string>

#include "tensor/backend.h"
#include "tensor/cuda/deferred_checks.h"
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Attrs dim_attr(int64_t d) {
  Attrs a;
  a.set("dim", d);
  return a;
}

Tensor indices(const Shape& shape, int64_t bound, uint64_t seed) {
  std::vector<double> v = noise(shape_numel(shape), seed, 0, static_cast<double>(bound));
  for (double& x : v) x = std::floor(x);
  return make(shape, v, DType::kI64);
}

TEST(CudaIndexSelectTest, EveryDtypeAndDim) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    Tensor x = random({5, 6, 7}, t, 71);
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t size = x.size(dim);
      expect_parity("index_select", {x, indices({9}, size, 72)}, dim_attr(dim), 0, 0,
                    str_cat(dtype_name(t), " dim ", dim));
    }
    expect_parity("index_select", {x, Tensor::empty({0}, DType::kI64)}, dim_attr(1), 0, 0, "no indices");
  }
  expect_parity("index_select", {random({6, 4}, DType::kF32, 73), indices({3}, 4, 74)}, dim_attr(1), 0, 0,
                "transposed input", [](size_t i, const Tensor& x) { return i == 0 ? x.t() : x; });
}

// index_select and index_copy_ move each slice as a run in the widest units
// (up to 16 bytes) that its length and both pointers allow: runs of 16n, 8, 4,
// 2 and 1 bytes and odd lengths, the table at an offset that drops its
// pointer's alignment (a slice from row 1), along dim 0 and a middle dim.
TEST(CudaIndexSelectTest, RunsOfEveryWidthAndAlignment) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kU8, DType::kF32, DType::kF64}) {
    for (int64_t d : {1024, 40, 12, 4, 3, 2, 1}) {
      const std::string what = str_cat(dtype_name(t), " rows of ", d);
      const Tensor table = random({7, d}, t, 80 + d);
      expect_parity("index_select", {table, indices({11}, 7, 81)}, dim_attr(0), 0, 0, what);
      expect_parity("index_select", {table, indices({11}, 6, 82)}, dim_attr(0), 0, 0, str_cat(what, ", from row 1"),
                    [](size_t i, const Tensor& x) { return i == 0 ? x.slice(0, 1, 7) : x; });
      expect_parity("index_select", {random({2, 5, d}, t, 83), indices({9}, 5, 84)}, dim_attr(1), 0, 0,
                    str_cat(what, ", middle dim"));
      // index_copy_ into a whole table, then into the table from row 1 (its pointer less aligned).
      for (int64_t from : {0, 1}) {
        const Tensor dst = random({7, d}, t, 85 + d), src = random({3, d}, t, 86 + d);
        const Tensor index = make({3}, {4, 0, 2}, DType::kI64);
        Tensor cpu = dst.clone(), gpu_dst = dst.to(gpu());
        dispatch("index_copy_", {cpu.slice(0, from, 7), index, src}, dim_attr(0));
        dispatch("index_copy_", {gpu_dst.slice(0, from, 7), index.to(gpu()), src.to(gpu())}, dim_attr(0));
        expect_match(gpu_dst.to(Device::cpu()), cpu, 0, 0, str_cat("index_copy_ ", what, " from row ", from));
      }
    }
  }
}

TEST(CudaIndexSelectTest, TrustedIndexGivesTheSameBitsAndStaysOnTheDevice) {
  COPPICE_REQUIRE_GPU();
  Attrs trusted = dim_attr(1);
  trusted.set("trusted", true);
  expect_parity("index_select", {random({5, 6, 7}, DType::kBF16, 91), indices({9}, 6, 92)}, trusted, 0, 0, "trusted");
  expect_parity("scatter_add",
                {random({4, 5}, DType::kF32, 93), indices({4, 30}, 5, 94), random({4, 30}, DType::kF32, 95)}, trusted,
                0, 0, "trusted");
  // A trusted index that is out of range anyway reads nothing outside x: its slices come out zero.
  Tensor x = random({3, 4}, DType::kF32, 96).to(gpu());
  const std::vector<double> got = values(index_select_trusted(x, 0, make({2}, {1, 7}, DType::kI64).to(gpu())));
  ASSERT_EQ(got.size(), 8u);
  for (size_t j = 4; j < 8; ++j) EXPECT_EQ(got[j], 0.0) << j;
}

TEST(CudaGatherTest, EveryDtypeAndDimWithSmallerIndex) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    Tensor x = random({4, 5, 6}, t, 75);
    for (int64_t dim : {0, 1, 2}) {
      Shape is = {3, 4, 5};  // no larger than x outside dim
      is[dim] = 8;           // any length along dim
      expect_parity("gather", {x, indices(is, x.size(dim), 76)}, dim_attr(dim), 0, 0,
                    str_cat(dtype_name(t), " dim ", dim));
    }
  }
  expect_parity("gather", {random({5}, DType::kF64, 77), indices({12}, 5, 78)}, dim_attr(0), 0, 0, "1-D");
  expect_parity("gather", {random({3, 4}, DType::kF32, 79), Tensor::empty({0, 4}, DType::kI64)}, dim_attr(0), 0, 0,
                "empty");
}

TEST(CudaScatterAddTest, BitExactWithDuplicatesEveryDtype) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    Tensor x = random({4, 5, 6}, t, 81);
    for (int64_t dim : {0, 1, 2}) {
      Shape is = {3, 4, 5};
      is[dim] = 40;  // many duplicates per target
      Tensor index = indices(is, x.size(dim), 82);
      Tensor src = random(is, t, 83);
      // Added in index order, rounded after each addition, like the CPU: exact.
      expect_parity("scatter_add", {x, index, src}, dim_attr(dim), 0, 0, str_cat(dtype_name(t), " dim ", dim));
    }
  }
  // Long runs into one target (an embedding-gradient pattern) and a larger src.
  Tensor x = Tensor::empty({10, 8});
  x.zero_();
  Tensor index = make({3000, 8}, std::vector<double>(3000 * 8, 3.0), DType::kI64);
  expect_parity("scatter_add", {x, index, random({3000, 8}, DType::kF32, 84)}, dim_attr(0), 0, 0, "one hot row");
  expect_parity("scatter_add",
                {random({6, 3}, DType::kF32, 85), indices({4, 2}, 6, 86), random({5, 3}, DType::kF32, 87)}, dim_attr(0),
                0, 0, "src larger than index");
  expect_parity("scatter_add",
                {random({6, 3}, DType::kF32, 88), Tensor::empty({0, 3}, DType::kI64), Tensor::empty({0, 3})},
                dim_attr(0), 0, 0, "no indices");
}

// On the GPU the index check is read back at the next synchronization
// (tensor/cuda/deferred_checks.h): the op, then a synchronize.
void dispatch_and_synchronize(const std::string& op, const std::vector<Tensor>& in, const Attrs& attrs) {
  dispatch(op, in, attrs);
  synchronize(gpu());
}

TEST(CudaIndexingTest, OutOfRangeIndicesThrowLikeTheCpu) {
  COPPICE_REQUIRE_GPU();
  Tensor x = random({5, 4}, DType::kF32, 91);
  for (std::vector<double> bad : {std::vector<double>{0, 2, 5, 1, 7}, std::vector<double>{1, -1, 3, -2, 0}}) {
    Tensor index = make({5}, bad, DType::kI64);
    const std::string want = error_of([&] { dispatch("index_select", {x, index}, dim_attr(0)); });
    ASSERT_NE(want, "");
    EXPECT_EQ(error_of([&] { dispatch_and_synchronize("index_select", to_gpu({x, index}), dim_attr(0)); }), want);
    Tensor index2 = make({5, 1}, bad, DType::kI64);
    const std::string want2 = error_of([&] { dispatch("gather", {x, index2}, dim_attr(0)); });
    ASSERT_NE(want2, "");
    EXPECT_EQ(error_of([&] { dispatch_and_synchronize("gather", to_gpu({x, index2}), dim_attr(0)); }), want2);
    Tensor src = random({5, 1}, DType::kF32, 92);
    const std::string want3 = error_of([&] { dispatch("scatter_add", {x, index2, src}, dim_attr(0)); });
    ASSERT_NE(want3, "");
    EXPECT_EQ(error_of([&] { dispatch_and_synchronize("scatter_add", to_gpu({x, index2, src}), dim_attr(0)); }), want3);
  }
  // Checked even when the result is empty.
  Tensor empty_rows = Tensor::empty({5, 0});
  Tensor bad = make({2}, {1, 9}, DType::kI64);
  EXPECT_EQ(error_of([&] {
              dispatch_and_synchronize("index_select", to_gpu({empty_rows, bad}), dim_attr(0));
            }),
            error_of([&] {
              dispatch("index_select", {empty_rows, bad}, dim_attr(0));
            }));
  // index_copy_ writes in place, so it checks before it writes: at the call,
  // and the destination keeps every value.
  Tensor dst = x.to(gpu());
  const std::string want_copy = error_of([&] {
    dispatch("index_copy_", {x.clone(), bad, zeros({2, 4})}, dim_attr(0));
  });
  ASSERT_NE(want_copy, "");
  EXPECT_EQ(error_of([&] {
              dispatch("index_copy_", {dst, bad.to(gpu()), zeros({2, 4}).to(gpu())}, dim_attr(0));
            }),
            want_copy);
  expect_match(dst.to(Device::cpu()), x, 0, 0, "index_copy_'s destination after the error");
  // The device is still usable afterwards.
  expect_parity("index_select", {x, make({2}, {4, 0}, DType::kI64)}, dim_attr(0), 0, 0, "after errors");
  expect_error([&] { dispatch("gather", to_gpu({x, make({2, 2}, {0, 1, 2, 3}, DType::kI32)}), dim_attr(0)); }, "i64");
}

// The index check does not make the host wait: the call returns with its
// check queued, a later read of any result (or synchronize) throws the
// first call's error, naming its op and index, and resolves it (the next
// read does not throw again). A check that passes throws nothing.
TEST(CudaIndexingTest, ABadIndexSurfacesAtTheNextRead) {
  COPPICE_REQUIRE_GPU();
  const Tensor x = random({5, 4}, DType::kF32, 93).to(gpu());
  const Tensor good = make({2}, {4, 0}, DType::kI64).to(gpu()), bad = make({3}, {1, 8, 2}, DType::kI64).to(gpu());
  synchronize(gpu());
  Tensor picked = index_select(x, 0, good);
  Tensor wrong = index_select(x, 0, bad);  // returns: nothing read back yet
  EXPECT_GE(cuda::pending_checks(0), size_t{1});
  EXPECT_EQ(wrong.shape(), (Shape{3, 4}));
  const Tensor unrelated = add(picked, 1.0);
  expect_error([&] { (void)unrelated.to(Device::cpu()); },
               "index_select: index 8 (at position 1) is out of range for dim 0 of size 5");
  EXPECT_EQ(cuda::pending_checks(0), size_t{0});
  expect_match(picked.to(Device::cpu()), index_select(x.to(Device::cpu()), 0, good.to(Device::cpu())), 0, 0,
               "the good call's result");
  // The embedding's context, which a try/catch at the call could not add.
  const Tensor w = random({6, 3}, DType::kF32, 94).to(gpu());
  (void)embedding(w, make({2}, {5, 6}, DType::kI64).to(gpu()));
  expect_error([&] { synchronize(gpu()); },
               "embedding: an index is out of range for 6 embeddings: index_select: index 6 (at position 1)");
  // A failure waits for the next synchronization or host copy: a later call
  // that queues a check of its own after the failure's answer has arrived
  // neither throws it nor wraps it in its own words.
  // (The indices are copied in first: a copy from the host settles the checks.)
  const Tensor seven = make({2}, {7, 0}, DType::kI64).to(gpu()), two = make({1}, {2}, DType::kI64).to(gpu()),
               three = make({1}, {3}, DType::kI64).to(gpu());
  (void)embedding(w, seven);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the answer is in; nothing settled it
  EXPECT_EQ(cuda::pending_checks(0), size_t{1});
  const Tensor later = embedding(w, two);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  (void)embedding(w, three);  // recycles `later`'s pass, keeps the failure
  EXPECT_EQ(cuda::pending_checks(0), size_t{2});
  const std::string message = error_of([&] { synchronize(gpu()); });
  EXPECT_NE(message.find("index_select: index 7 (at position 0) is out of range for dim 0 of size 6"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("embedding:"), message.rfind("embedding:")) << "wrapped once: " << message;
  EXPECT_EQ(cuda::pending_checks(0), size_t{0});
}

// embedding_backward against its CPU twin: sums in index order in the
// compute type (the same bits in f32/f64: each row's sum runs in one order),
// a skewed index (one row takes most), rows no index names, and the range error.
TEST(CudaEmbeddingBackwardTest, MatchesTheCpu) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    std::vector<double> ix = noise(300, 31, 0, 40);
    for (size_t i = 0; i < ix.size(); ++i) ix[i] = i % 3 == 0 ? 7 : std::floor(ix[i]);
    const Tensor index = make({3, 100}, ix, DType::kI64), g = random({3, 100, 17}, t, 32);
    const Tensor want = embedding_backward(g, index, 50);
    const Tensor got = embedding_backward(g.to(gpu()), index.to(gpu()), 50);
    const Tol tol = t == DType::kBF16 || t == DType::kF16 ? math_tol(t) : Tol{1e-12, 1e-12};
    expect_match(got.to(Device::cpu()), want, tol.rtol, tol.atol, std::string(dtype_name(t)));
  }
  const Tensor bad = make({2}, {1, 50}, DType::kI64).to(gpu());
  expect_error(
      [&] {
        (void)embedding_backward(zeros({2, 4}, TensorOptions(DType::kF32, gpu())), bad, 50).to(Device::cpu());
      },
      "index 50 (at position 1) is out of range for dim 0 of size 50");
}

}  // namespace
}  // namespace coppice
