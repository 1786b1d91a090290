// A sparse linear's three gradients in one pass (sparse/ops.h's
// linear_grads_fused; on Hopper, 32x32 BSR blocks of bf16/f16:
// sparse/cuda/bsr_wgmma32_grads.h) against f64 references on the CPU and
// against the kernels it replaces: token counts that are not multiples of
// the kernel's 128-token step, ranges split or not, empty block rows and
// columns, odd columns, the longest columns it takes, the gelu gradient
// forms, the same bits on every run; what it declines; and its host plan
// (linear_grads_plan.h), which runs without a GPU.
#include <chrono>
#include <cstdio>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/cuda/linear_grads_plan.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using LinearGradsTest = SparseCudaTest;

bool hopper() { return cuda_available() && cuda::runs_sm90a(0, "linear_grads_test"); }

#define SKIP_OFF_HOPPER() \
  SKIP_WITHOUT_CUDA();    \
  if (!hopper()) GTEST_SKIP() << "the one-pass kernel runs on compute capability 9.0 (sm_90a) alone"

struct Problem {
  Tensor g, x, w, z;  // on the GPU, in the run's dtype
};

// W [out, in] of 32x32 blocks at `density` (block rows `empty_rows` and
// block column `empty_col` without blocks, where >= 0), g [n, out], x and z [n, in].
Problem problem(int64_t n, int64_t out, int64_t in, double density, DType dtype, uint64_t seed,
                std::vector<int64_t> empty_rows = {}, int64_t empty_col = -1) {
  Tensor dense = random_blocks(out, in, 32, 32, density, seed, empty_rows);
  if (empty_col >= 0) {
    std::vector<double> v = dense.to_vector<double>();
    for (int64_t r = 0; r < out; ++r) {
      for (int64_t c = 32 * empty_col; c < 32 * empty_col + 32; ++c) v[static_cast<size_t>(r * in + c)] = 0.0;
    }
    dense = from_vector(v, {out, in}, TensorOptions(DType::kF64));
  }
  Problem p;
  p.w = to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(32, 32)), kCuda);
  p.g = random_dense({n, out}, seed + 2).to(dtype).to(kCuda);
  p.x = random_dense({n, in}, seed + 3).to(dtype).to(kCuda);
  p.z = random_dense({n, in}, seed + 4).to(dtype).to(kCuda);
  return p;
}

// The three gradients in f64 on the CPU from the GPU's (rounded) operands.
LinearGrads reference(const Problem& p, bool with_z, GeluForm form) {
  const Tensor g = host64(p.g), x = host64(p.x), w = host64(to_dense(p.w));
  LinearGrads want;
  want.input = matmul(g, w);
  if (with_z) want.input = gelu_backward_of_form(want.input, host64(p.z), form);
  want.weight = to_dense(sddmm(g.t().contiguous(), x, to_dtype(to_device(p.w, Device::cpu()), DType::kF64)));
  want.bias = sum(g, {0});
  return want;
}

::testing::AssertionResult matches(const LinearGrads& got, const LinearGrads& want, DType dtype) {
  if (!got.weight.defined() || !got.input.defined() || !got.bias.defined()) {
    return ::testing::AssertionFailure() << "declined";
  }
  if (auto r = near(got.input, want.input, dtype); !r) return r << " (input)";
  if (auto r = near(to_dense(got.weight), want.weight, dtype); !r) return r << " (weight)";
  if (auto r = near(got.bias, want.bias, dtype); !r) return r << " (bias)";
  return ::testing::AssertionSuccess();
}

TEST_F(LinearGradsTest, MatchesCpu) {
  SKIP_OFF_HOPPER();
  struct Case {
    int64_t n, out, in;
    double density;
    std::vector<int64_t> empty_rows;
    int64_t empty_col;
  };
  const std::vector<Case> cases = {
      {300, 96, 160, 0.5, {1}, 2},       // 3 steps, the last short; an empty block row and column
      {5000, 160, 96, 0.6, {0, 4}, -1},  // ranges split (few columns)
      {129, 64, 64, 1.0, {}, -1},        // one token past a step
      {1, 64, 96, 0.5, {}, 0},           // one token
      {700, 768, 64, 1.0, {}, -1},       // columns of 24 blocks: the longest taken
      {640, 224, 128, 0.7, {3}, 1},      // odd columns
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const Problem p = problem(c.n, c.out, c.in, c.density, dtype, 100 + i, c.empty_rows, c.empty_col);
      const LinearGrads got = linear_grads_fused(p.g, p.x, p.w, /*bias=*/true);
      EXPECT_TRUE(matches(got, reference(p, false, GeluForm::kErf), dtype)) << "case " << i << " " << dtype_name(dtype);
      const LinearGrads no_bias = linear_grads_fused(p.g, p.x, p.w, /*bias=*/false);
      EXPECT_FALSE(no_bias.bias.defined());
      ASSERT_TRUE(no_bias.weight.defined());
      EXPECT_TRUE(same_bits(values(no_bias.weight), values(got.weight))) << "case " << i;
      EXPECT_TRUE(same_bits(no_bias.input, got.input)) << "case " << i;
    }
  }
}

TEST_F(LinearGradsTest, GeluGradientForms) {
  SKIP_OFF_HOPPER();
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    const Problem p = problem(1000, 128, 192, 0.5, DType::kBF16, 7, {2}, 1);
    const LinearGrads got = linear_grads_fused(p.g, p.x, p.w, true, p.z, form);
    EXPECT_TRUE(matches(got, reference(p, true, form), DType::kBF16)) << (form == GeluForm::kTanh ? "tanh" : "erf");
    // The plain form's product through the elementwise op, within one rounding.
    const LinearGrads plain = linear_grads_fused(p.g, p.x, p.w, true);
    ASSERT_TRUE(plain.input.defined());
    EXPECT_TRUE(near(got.input, gelu_backward_of_form(plain.input, p.z, form), DType::kBF16));
  }
}

// Against the kernels it replaces (dy W and the SDDMM with its row sums), at
// the GPT's shapes: 16384 tokens, 90 % of the blocks removed.
TEST_F(LinearGradsTest, MatchesTheKernelsApartAtTheGptsShapes) {
  SKIP_OFF_HOPPER();
  const int64_t shapes[][2] = {{1024, 1024}, {3072, 1024}, {4096, 1024}, {1024, 4096}};
  for (const auto& s : shapes) {
    const Problem p = problem(16384, s[0], s[1], 0.1, DType::kBF16, 31 + s[0] + s[1]);
    const LinearGrads got = linear_grads_fused(p.g, p.x, p.w, true);
    ASSERT_TRUE(got.weight.defined()) << s[0] << "x" << s[1];
    const Tensor apart_input = matmul(p.g, p.w);
    const auto [apart_weight, apart_bias] = sddmm_row_sums(p.g.t(), p.x, p.w);
    EXPECT_TRUE(near(got.input, apart_input, DType::kBF16)) << s[0] << "x" << s[1];
    EXPECT_TRUE(near(values(got.weight), values(apart_weight), DType::kBF16)) << s[0] << "x" << s[1];
    EXPECT_TRUE(near(got.bias, apart_bias, DType::kBF16)) << s[0] << "x" << s[1];
  }
}

TEST_F(LinearGradsTest, RepeatsBitForBit) {
  SKIP_OFF_HOPPER();
  const Problem p = problem(4000, 1024, 512, 0.15, DType::kBF16, 5, {3});
  const LinearGrads a = linear_grads_fused(p.g, p.x, p.w, true, p.z, GeluForm::kErf);
  for (int i = 0; i < 3; ++i) {
    const LinearGrads b = linear_grads_fused(p.g, p.x, p.w, true, p.z, GeluForm::kErf);
    ASSERT_TRUE(b.weight.defined());
    EXPECT_TRUE(same_bits(values(a.weight), values(b.weight)));
    EXPECT_TRUE(same_bits(a.input, b.input));
    EXPECT_TRUE(same_bits(a.bias, b.bias));
  }
}

TEST_F(LinearGradsTest, DeclinesWhatItDoesNotTake) {
  SKIP_WITHOUT_CUDA();
  auto declined = [](const LinearGrads& g) { return !g.weight.defined() && !g.input.defined() && !g.bias.defined(); };
  // f32, 64x64 blocks, a column of 25 blocks, the route pinned apart.
  const Problem f32 = problem(256, 64, 64, 1.0, DType::kF32, 1);
  EXPECT_TRUE(declined(linear_grads_fused(f32.g, f32.x, f32.w, true)));
  const Problem long_column = problem(256, 800, 64, 1.0, DType::kBF16, 2);
  EXPECT_TRUE(declined(linear_grads_fused(long_column.g, long_column.x, long_column.w, true)));
  const Tensor w64 = to_device(
      to_format(random_blocks(128, 128, 64, 64, 1.0, 3).to(DType::kBF16), "bsr", FormatOptions::block(64, 64)), kCuda);
  const Tensor g = random_dense({256, 128}, 4).to(DType::kBF16).to(kCuda);
  EXPECT_TRUE(declined(linear_grads_fused(g, g, w64, true)));
  const Problem ok = problem(256, 64, 64, 1.0, DType::kBF16, 5);
  {
    ScopedRoutePins pins("linear_grads=apart");
    EXPECT_TRUE(declined(linear_grads_fused(ok.g, ok.x, ok.w, true)));
  }
  // Bad operands are errors, not declines.
  EXPECT_THROW(linear_grads_fused(ok.g, ok.x.t(), ok.w, true), Error);
  EXPECT_THROW(linear_grads_fused(ok.g, ok.x, ok.w, true, ok.z.narrow(1, 0, 32).contiguous()), Error);
}

// The host's plan, on the CPU.
TEST(LinearGradsPlanTest, EachBlockRowSumsOnceSpreadOverTheColumns) {
  // Columns: 0 holds rows {0, 1, 2}, 1 holds {0, 1}, 2 holds {1}; row 3 has no block.
  const std::vector<int32_t> ptr = {0, 3, 5, 6}, row = {0, 1, 2, 0, 1, 1};
  const std::vector<uint32_t> masks = sparse_cuda::linear_grads_sum_masks(ptr, row, 4);
  ASSERT_EQ(masks.size(), 3u);
  std::multiset<int32_t> rows;
  for (size_t c = 0; c < 3; ++c) {
    for (int32_t e = ptr[c]; e < ptr[c + 1]; ++e) {
      if ((masks[c] >> (e - ptr[c])) & 1u) rows.insert(row[static_cast<size_t>(e)]);
    }
  }
  EXPECT_EQ(rows, (std::multiset<int32_t>{0, 1, 2}));
  EXPECT_EQ(masks[0], 5u);  // row 0 (every column free: the lowest) and row 2 (only there)
  EXPECT_EQ(masks[1], 2u);  // row 1 (column 0 has one)
  EXPECT_EQ(masks[2], 0u);
  EXPECT_EQ(sparse_cuda::empty_block_rows(row, 5), (std::vector<int32_t>{3, 4}));
}

TEST(LinearGradsPlanTest, SplitsTheTokensIntoAboutTwoThreadBlocksAnSm) {
  // The GPT's shapes on an H100 (132 SMs, 16384 tokens): 32 block columns
  // in 8 ranges, 128 in 2; a few tokens: ranges of at least four steps.
  EXPECT_EQ(sparse_cuda::linear_grads_splits(32, 16384, 128, 132), 8);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(128, 16384, 128, 132), 2);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(1000, 16384, 128, 132), 1);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(32, 1024, 128, 132), 2);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(32, 100, 128, 132), 1);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(1, 1 << 20, 128, 132), 16);
  EXPECT_EQ(sparse_cuda::linear_grads_splits(32, 0, 128, 132), 1);
  // Ranges of ceil(steps / count) steps make exactly `count` of them.
  for (int64_t n : {1000, 5000, 16384, 100000}) {
    for (int64_t cols : {1, 7, 32, 128}) {
      const int64_t count = sparse_cuda::linear_grads_splits(cols, n, 128, 132), steps = (n + 127) / 128;
      const int64_t range = (steps + count - 1) / count;
      EXPECT_EQ((steps + range - 1) / range, count) << n << " tokens, " << cols << " columns";
    }
  }
}

// Wall time of the GPT's shapes, one pass against the kernels apart
// (run by hand: --gtest_also_run_disabled_tests --gtest_filter='*Times*').
TEST_F(LinearGradsTest, DISABLED_TimesTheGptShapes) {
  SKIP_OFF_HOPPER();
  const int64_t shapes[][2] = {{1024, 1024}, {3072, 1024}, {4096, 1024}, {1024, 4096}};
  auto time_ms = [](const auto& f) {
    for (int i = 0; i < 3; ++i) f();
    synchronize(kCuda);
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kReps = 50;
    for (int i = 0; i < kReps; ++i) f();
    synchronize(kCuda);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kReps;
  };
  for (bool gelu : {false, true}) {
    for (const auto& s : shapes) {
      if (gelu && s[1] != 4096) continue;  // fc2: its input is the gelu's output
      const Problem p = problem(16384, s[0], s[1], 0.1, DType::kBF16, 9);
      const Tensor z = gelu ? p.z : Tensor();
      const double one = time_ms([&] { linear_grads_fused(p.g, p.x, p.w, true, z, GeluForm::kErf); });
      const double apart = time_ms([&] {
        if (gelu) {
          matmul_gelu_backward(p.g, p.w, p.z, GeluForm::kErf);
        } else {
          matmul(p.g, p.w);
        }
        sddmm_row_sums(p.g.t(), p.x, p.w);
      });
      std::printf("linear_grads %lldx%lld%s: one pass %.4f ms, apart %.4f ms (%.3fx)\n", static_cast<long long>(s[0]),
                  static_cast<long long>(s[1]), gelu ? " gelu" : "", one, apart, apart / one);
    }
  }
}

}  // namespace
}  // namespace coppice
