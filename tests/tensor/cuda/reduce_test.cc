// CPU parity of reduce_sum, reduce_max and reduce_min over rows of [outer, r], and of the column sums.
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

// Short rows take the warp-per-row path, long ones the block-per-row path,
// and few very long rows the two-pass path over row segments.
const std::vector<Shape> kShapes = {{1, 1},    {7, 5},    {33, 31},    {4, 1000},  {3, 1024},
                                    {2, 5000}, {300, 65}, {1, 100000}, {3, 40000}, {0, 4}};

TEST(CudaReduceTest, SumEveryDtype) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    for (const Shape& s : kShapes) {
      Tensor x = random(s, t, 41, -1, 1);
      // Float sums add in another order than the CPU's: bound by the row's absolute sum.
      double rtol = 0, atol = 0;
      if (t == DType::kF32) rtol = 1e-5, atol = 1e-6 * static_cast<double>(s[1]);
      if (t == DType::kF64) rtol = 1e-12, atol = 1e-14 * static_cast<double>(s[1]);
      if (t == DType::kBF16 || t == DType::kF16) rtol = 1e-2, atol = 2e-2;
      expect_parity("reduce_sum", {x}, {}, rtol, atol, str_cat(dtype_name(t), " ", shape_to_string(s)));
    }
  }
  // Rows of length 0 sum to 0.
  expect_parity("reduce_sum", {Tensor::empty({3, 0})}, {}, 0, 0, "r = 0");
}

TEST(CudaReduceTest, IntegerSumsAreExactAndWrap) {
  COPPICE_REQUIRE_GPU();
  Tensor big = make({2, 3}, {9.2e18, 9.2e18, 1, -5, 7, 9}, DType::kI64);
  expect_parity("reduce_sum", {big}, {}, 0, 0, "i64 wrap");
  expect_parity("reduce_sum", {random({5, 3000}, DType::kU8, 42)}, {}, 0, 0, "u8 to i64");
}

TEST(CudaReduceTest, MaxMinEveryDtypeWithTies) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    for (const Shape& s : kShapes) {
      if (s[0] == 0) continue;
      // Few distinct values, so ties are everywhere: the first index must win.
      std::vector<double> v = noise(shape_numel(s), 43, 0, 4);
      for (double& x : v) x = t == DType::kBool ? (x > 2) : std::floor(x) - (t == DType::kU8 ? 0 : 1);
      Tensor x = make(s, v, t);
      for (const char* op : {"reduce_max", "reduce_min"}) {
        expect_parity(op, {x}, {}, 0, 0, str_cat(dtype_name(t), " ", shape_to_string(s)));
      }
    }
  }
}

TEST(CudaReduceTest, NaNWinsFirstOneAndSignedZeros) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    std::vector<double> v = noise(4 * 2000, 44, -1, 1);
    v[10] = kNaN;    // row 0: an early NaN
    v[1999] = kNaN;  // row 0: a later one; the first must win
    v[2000 + 1500] = kNaN;
    v[4000] = -0.0;  // row 2: zeros of both signs are equal; the first counts
    for (int i = 4001; i < 6000; ++i) v[i] = (i % 2) ? 0.0 : -0.0;
    v[6000 + 7] = kInf;
    v[6000 + 8] = -kInf;
    Tensor x = make({4, 2000}, v, t);
    for (const char* op : {"reduce_max", "reduce_min"}) expect_parity(op, {x}, {}, 0, 0, str_cat(dtype_name(t)));
    Tensor short_rows = make({4, 8}, {kNaN, 1, 2, 3, 4, 5, 6, 7, 1,    kNaN,  kNaN, 0, 0, 0, 0, 0,
                                      -0.0, 0, 0, 0, 0, 0, 0, 0, kInf, -kInf, 3,    3, 3, 3, 3, 3},
                             t);
    for (const char* op : {"reduce_max", "reduce_min"}) expect_parity(op, {short_rows}, {}, 0, 0, "short rows");
    // Rows long enough to be cut into segments: NaNs in two segments, the earlier must win.
    std::vector<double> w = noise(2 * 100000, 46, -1, 1);
    w[70000] = kNaN;
    w[30001] = kNaN;
    w[100000 + 99999] = kInf;
    Tensor long_rows = make({2, 100000}, w, t);
    for (const char* op : {"reduce_max", "reduce_min"}) expect_parity(op, {long_rows}, {}, 0, 0, "long rows");
  }
}

TEST(CudaReduceTest, NonContiguousInputAndErrors) {
  COPPICE_REQUIRE_GPU();
  Tensor x = random({40, 30}, DType::kF32, 45);
  expect_parity("reduce_max", {x}, {}, 0, 0, "transposed", [](size_t, const Tensor& a) { return a.t(); });
  expect_parity("reduce_sum", {x}, {}, 1e-5, 1e-5, "transposed", [](size_t, const Tensor& a) { return a.t(); });
  Tensor e = Tensor::empty({3, 0}, TensorOptions(gpu()));
  expect_error([&] { dispatch("reduce_max", {e}); }, "empty dimension");
  expect_error([&] { dispatch("reduce_sum", {Tensor::empty({3}, TensorOptions(gpu()))}); }, "2-D");
}

// Column sums (the bias gradient's sum over a batch), the kernel and its CPU
// twin, and sum over leading dims (or over a transpose's rows) through the
// frontend, which takes it.
TEST(CudaReduceTest, ColumnSumsMatchTheCpu) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    // Columns a multiple of 16 bytes (the vector path) and not; rows in one
    // chunk (pass 1 writes the totals: {32, 4096} as a position table's
    // gradient) and over many (pass 2's lanes each take several).
    for (const Shape& shape : std::vector<Shape>{
             {1, 1}, {3, 300}, {64, 7}, {32, 4096}, {65, 5}, {1000, 33}, {4097, 2}, {3000, 48}, {700, 1040}}) {
      const Tensor x = random(shape, t, 31);
      const Tol tol = t == DType::kF64 ? Tol{1e-12, 1e-12} : t == DType::kF32 ? Tol{1e-5, 1e-5} : math_tol(t);
      expect_parity("reduce_sum_cols", {x}, {}, tol.rtol * 10, tol.atol * 10,
                    str_cat(dtype_name(t), " ", shape_to_string(shape)));
    }
    // Columns a multiple of 16 bytes, but data one element past an aligned
    // start: the element path.
    const Tensor rows = random({8 * 65 + 1}, t, 33).to(gpu()).slice(0, 1, 8 * 65 + 1).reshape({65, 8});
    const Tol tol = t == DType::kF64 ? Tol{1e-12, 1e-12} : t == DType::kF32 ? Tol{1e-5, 1e-5} : math_tol(t);
    expect_match(dispatch("reduce_sum_cols", {rows})[0].to(Device::cpu()),
                 dispatch("reduce_sum_cols", {rows.to(Device::cpu())})[0], tol.rtol * 10, tol.atol * 10,
                 str_cat(dtype_name(t), " misaligned view"));
  }
  // The same bits on every run.
  const Tensor big = random({5000, 1024}, DType::kBF16, 34).to(gpu());
  expect_match(dispatch("reduce_sum_cols", {big})[0].to(Device::cpu()),
               dispatch("reduce_sum_cols", {big})[0].to(Device::cpu()), 0, 0, "repeat");
  const Tensor x = random({6, 5, 4}, DType::kF32, 32);
  expect_match(sum(x.to(gpu()), {0, 1}).to(Device::cpu()), sum(x, {0, 1}), 1e-5, 1e-5, "sum over leading dims");
  expect_match(sum(x.to(gpu()), {0}, true).to(Device::cpu()), sum(x, {0}, true), 1e-5, 1e-5, "keepdim");
  // The row sums of a transposed view (dy^T) take the column sums in place.
  const Tensor y = random({300, 40}, DType::kF32, 35);
  expect_match(sum(y.to(gpu()).t(), {1}).to(Device::cpu()), sum(y.t(), {1}), 1e-5, 1e-5, "rows of a transpose");
  expect_match(sum(y.to(gpu()).t(), {1}, true).to(Device::cpu()), sum(y.t(), {1}, true), 1e-5, 1e-5,
               "rows of a transpose, keepdim");
}

// Column sums of each slab of [batch, r, inner] (a sum over middle dims),
// against the CPU twin, and sum and mean over middle dims through the
// frontend, which takes them in place of a permuted copy and row sums.
TEST(CudaReduceTest, SlabColumnSumsMatchTheCpu) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    // One row a slab, rows in one chunk and over many; columns a multiple of
    // 16 bytes (a thread's columns never cross a slab) and not.
    for (const Shape& shape : std::vector<Shape>{{5, 1, 8}, {3, 64, 7}, {2, 300, 2}, {32, 130, 64}, {7, 1000, 48}}) {
      const Tensor x = random(shape, t, 36);
      const Tol tol = t == DType::kF64 ? Tol{1e-12, 1e-12} : t == DType::kF32 ? Tol{1e-5, 1e-5} : math_tol(t);
      expect_parity("reduce_sum_cols", {x}, {}, tol.rtol * 10, tol.atol * 10,
                    str_cat(dtype_name(t), " ", shape_to_string(shape)));
    }
  }
  expect_parity("reduce_sum_cols", {Tensor::empty({3, 0, 4})}, {}, 0, 0, "r = 0");
  const Tensor big = random({8, 512, 256}, DType::kBF16, 37).to(gpu());
  expect_match(dispatch("reduce_sum_cols", {big})[0].to(Device::cpu()),
               dispatch("reduce_sum_cols", {big})[0].to(Device::cpu()), 0, 0, "repeat");
  const Tensor x = random({3, 4, 5, 6}, DType::kF32, 38);
  expect_match(sum(x.to(gpu()), {1}).to(Device::cpu()), sum(x, {1}), 1e-5, 1e-5, "sum over a middle dim");
  expect_match(sum(x.to(gpu()), {1, 2}, true).to(Device::cpu()), sum(x, {1, 2}, true), 1e-5, 1e-5,
               "two middle dims, keepdim");
  expect_match(mean(x.to(gpu()), {2}).to(Device::cpu()), mean(x, {2}), 1e-5, 1e-5, "mean over a middle dim");
  expect_match(sum(x.to(gpu()), {1, 3}).to(Device::cpu()), sum(x, {1, 3}), 1e-5, 1e-5, "two runs: the rows path");
  const Tensor tokens = random({4, 50, 16}, DType::kBF16, 39);
  expect_match(mean(tokens.to(gpu()), {1}).to(Device::cpu()), mean(tokens, {1}), 1e-2, 1e-2, "bf16 token mean");
  // More rows than 64-row chunks fit a grid's 65535 rows: longer chunks.
  const Tensor tall = random({4'300'000, 2}, DType::kF32, 40);
  expect_match(sum(tall.to(gpu()), {0}).to(Device::cpu()), sum(tall, {0}), 1e-4, 1e-2, "4.3M rows");
  expect_error(
      [&] {
        dispatch("reduce_sum_cols", {Tensor::empty({2, 3, 4, 5}, TensorOptions(gpu()))});
      },
      "[batch, r, inner]");
}

// relu_backward and its column sums in one pass (linear_relu's input and
// bias gradients), against the CPU twin: the vectorized path (columns a
// multiple of 16 bytes) and the element path (odd columns), every floating
// dtype, rows in one chunk (the first pass writes the totals: up to 64
// rows) and across several; the gradient is exact (a copy or 0).
TEST(CudaReduceTest, ReluBackwardColumnSumsMatchTheCpu) {
  COPPICE_REQUIRE_GPU();
  for (DType t : floating_dtypes()) {
    for (const Shape& shape :
         std::vector<Shape>{{1, 8}, {3, 300}, {64, 40}, {32, 4096}, {130, 64}, {200, 33}, {1000, 16}}) {
      const Tensor g = random(shape, t, 41), y = random(shape, t, 42);
      const Tol tol = t == DType::kF64 ? Tol{1e-12, 1e-12} : t == DType::kF32 ? Tol{1e-5, 1e-5} : math_tol(t);
      expect_parity("relu_backward_col_sums", {g, y}, {}, tol.rtol * 10, tol.atol * 10,
                    str_cat(dtype_name(t), " ", shape_to_string(shape)));
      const auto [dg, sums] = relu_backward_col_sums(g.to(gpu()), y.to(gpu()));
      expect_match(dg.to(Device::cpu()), relu_backward(g, y), 0, 0, "the gradient, exactly");
    }
  }
  // A transposed operand is made contiguous by the frontend.
  const Tensor g = random({40, 24}, DType::kF32, 43), y = random({24, 40}, DType::kF32, 44).t();
  const auto [dg, sums] = relu_backward_col_sums(g.to(gpu()), y.to(gpu()));
  expect_match(sums.to(Device::cpu()), sum(relu_backward(g, y), {0}), 1e-5, 1e-5, "strided y");
  expect_error([&] { relu_backward_col_sums(g.to(gpu()), g.t().to(gpu())); }, "one 2-D shape");
}

}  // namespace
}  // namespace coppice
