// CPU-vs-CUDA parity of dense_mask_to_csr (sparse/cuda/dense_mask_to_csr.cu
// against sparse/cpu/dense_mask_to_csr.cc), and of sparse_from_mask into CSR
// and CSC, which runs on it: the same parts bit for bit, in every floating
// dtype, with empty, full and single rows, wide rows, rows whose width is no
// multiple of a 16-byte chunk, an unaligned base (no vector loads),
// non-contiguous inputs and no entries at all. Skips without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/sparse/cuda/cuda_test_util.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using Input = testing::MaskedInput;  // on the host
using testing::bytes_of;
using testing::kFloatingDtypes;
using testing::random_masked_input;

::testing::AssertionResult same_parts(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  const char* names[] = {"crow", "col", "values"};
  if (got.size() != 3 || want.size() != 3) return ::testing::AssertionFailure() << "expected 3 parts";
  for (size_t i = 0; i < 3; ++i) {
    if (got[i].dtype() != want[i].dtype() || got[i].shape() != want[i].shape()) {
      return ::testing::AssertionFailure()
             << names[i] << ": " << dtype_name(got[i].dtype()) << " " << shape_to_string(got[i].shape()) << " vs "
             << dtype_name(want[i].dtype()) << " " << shape_to_string(want[i].shape());
    }
    if (bytes_of(got[i]) != bytes_of(want[i])) return ::testing::AssertionFailure() << names[i] << " differ";
  }
  return ::testing::AssertionSuccess();
}

std::vector<Tensor> parts_of(const Tensor& t) {
  const CompressedImpl& c = csr_impl(t, "test");
  return {c.pointers(), c.indices(), c.values()};
}

// The op on both devices (contiguous inputs), and sparse_from_mask into CSR
// and CSC from (x, mask) as given, which may be views.
void expect_parity(const Tensor& x, const Tensor& mask, const std::string& what) {
  const std::vector<Tensor> cpu = dispatch("dense_mask_to_csr", {x.contiguous(), mask.contiguous()});
  const std::vector<Tensor> gpu =
      dispatch("dense_mask_to_csr", {x.contiguous().to(kCuda), mask.contiguous().to(kCuda)});
  for (const Tensor& p : gpu) EXPECT_EQ(p.device(), kCuda) << what;
  EXPECT_TRUE(same_parts(gpu, cpu)) << what << " (op)";
  for (const char* f : {"csr", "csc"}) {
    Tensor on_cpu = sparse_from_mask(x, mask, f);
    Tensor on_gpu = sparse_from_mask(x.to(kCuda), mask.to(kCuda), f);
    EXPECT_EQ(on_gpu.device(), kCuda) << what << " " << f;
    EXPECT_EQ(on_gpu.layout(), on_cpu.layout()) << what << " " << f;
    EXPECT_EQ(on_gpu.shape(), on_cpu.shape()) << what << " " << f;
    EXPECT_TRUE(same_parts(parts_of(on_gpu), parts_of(on_cpu))) << what << " " << f;
  }
}

// Views on the device too: x and mask moved first, then viewed.
void expect_view_parity(const Input& a, const std::string& what) {
  Tensor xg = a.x.to(kCuda), mg = a.mask.to(kCuda);
  for (const char* f : {"csr", "csc"}) {
    EXPECT_TRUE(
        same_parts(parts_of(sparse_from_mask(xg.t(), mg.t(), f)), parts_of(sparse_from_mask(a.x.t(), a.mask.t(), f))))
        << what << " transposed " << f;
    EXPECT_TRUE(same_parts(
        parts_of(sparse_from_mask(xg.slice(1, 1, xg.size(1), 3), mg.slice(1, 1, mg.size(1), 3), f)),
        parts_of(sparse_from_mask(a.x.slice(1, 1, a.x.size(1), 3), a.mask.slice(1, 1, a.mask.size(1), 3), f))))
        << what << " strided " << f;
  }
}

class DenseMaskToCsrCudaTest : public SparseCudaTest {};

TEST_F(DenseMaskToCsrCudaTest, MatchesTheCpuBitForBit) {
  SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(Dispatcher::instance().has_kernel("dense_mask_to_csr", DeviceType::kCuda));
  uint64_t seed = 7;
  for (DType dtype : kFloatingDtypes) {
    const std::string d(dtype_name(dtype));
    for (double keep : {0.0, 0.02, 0.5, 1.0}) {
      const std::string k = d + " keep " + std::to_string(keep);
      Input a = random_masked_input({33, 64}, keep, seed++, dtype, {0, 5, 32}, {3, 7});
      expect_parity(a.x, a.mask, k + " 33x64 (whole chunks)");
      Input b = random_masked_input({17, 45}, keep, seed++, dtype, {2}, {4});
      expect_parity(b.x, b.mask, k + " 17x45 (partial chunks)");
      Input one = random_masked_input({1, 300}, keep, seed++, dtype);
      expect_parity(one.x, one.mask, k + " 1 row");
      Input wide = random_masked_input({3, 5000}, keep, seed++, dtype, {1});
      expect_parity(wide.x, wide.mask, k + " wide");
      Input tall = random_masked_input({2049, 3}, keep, seed++, dtype);
      expect_parity(tall.x, tall.mask, k + " tall");
      expect_view_parity(b, k);
    }
    // An unaligned base with whole chunks per row: the element-wise loads.
    Input a = random_masked_input({8, 64}, 0.5, seed++, dtype, {1}, {2});
    Tensor flat_x = cat({zeros({1}, a.x.options()), a.x.reshape({-1})}).to(kCuda);
    Tensor flat_m = ne(cat({zeros({1}), a.mask.to(DType::kF32).reshape({-1})}), 0.0).to(kCuda);
    Tensor xu = flat_x.slice(0, 1, flat_x.size(0)).view({8, 64});
    Tensor mu = flat_m.slice(0, 1, flat_m.size(0)).view({8, 64});
    ASSERT_TRUE(xu.is_contiguous());
    EXPECT_TRUE(same_parts(dispatch("dense_mask_to_csr", {xu, mu}),
                           dispatch("dense_mask_to_csr", {a.x.contiguous(), a.mask.contiguous()})))
        << d << " unaligned";
    // No rows, no columns.
    Input none = random_masked_input({0, 5}, 0.5, seed++, dtype);
    expect_parity(none.x, none.mask, d + " 0 rows");
    Input narrow = random_masked_input({4, 0}, 0.5, seed++, dtype);
    expect_parity(narrow.x, narrow.mask, d + " 0 cols");
  }
}

TEST_F(DenseMaskToCsrCudaTest, ThresholdAndDenseToCsrAgreeWithTheCpu) {
  SKIP_WITHOUT_CUDA();
  Input a = random_masked_input({40, 96}, 1.0, 99, DType::kF32);
  for (const char* f : {"csr", "csc"}) {
    EXPECT_TRUE(same_parts(parts_of(sparse_from_threshold(a.x.to(kCuda), 0.7, f)),
                           parts_of(sparse_from_threshold(a.x, 0.7, f))))
        << f;
  }
}

TEST_F(DenseMaskToCsrCudaTest, RejectsBadInputs) {
  SKIP_WITHOUT_CUDA();
  Tensor x = zeros({2, 3}).to(kCuda);
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x, zeros({2, 3}).to(kCuda)}));  // f32 mask
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x, ne(zeros({3, 2}), 0.0).to(kCuda)}));
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x.t(), ne(zeros({3, 2}), 0.0).to(kCuda)}));  // not contiguous
}

}  // namespace
}  // namespace coppice
