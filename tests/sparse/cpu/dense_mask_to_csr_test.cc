// dense_mask_to_csr's CPU kernel (sparse/cpu/dense_mask_to_csr.cc) behind
// sparse_from_mask(.., "csr" / "csc"): the same entries, order, values (bit
// for bit) and i32 index dtype as the COO path it replaced
// (coo_to_csr / coo_to_csc of sparse_from_mask(.., "coo")).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/csr.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using Input = testing::MaskedInput;
using testing::bytes_of;
using testing::kFloatingDtypes;
using testing::random_masked_input;

::testing::AssertionResult same_compressed(const Tensor& got, const Tensor& want) {
  if (got.layout() != want.layout()) return ::testing::AssertionFailure() << "layouts differ";
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << "shapes differ";
  const CompressedImpl& g = csr_impl(got, "test");
  const CompressedImpl& w = csr_impl(want, "test");
  const Tensor gp[] = {g.pointers(), g.indices(), g.values()};
  const Tensor wp[] = {w.pointers(), w.indices(), w.values()};
  const char* names[] = {"pointers", "indices", "values"};
  for (int i = 0; i < 3; ++i) {
    if (gp[i].dtype() != wp[i].dtype()) {
      return ::testing::AssertionFailure()
             << names[i] << ": " << dtype_name(gp[i].dtype()) << " vs " << dtype_name(wp[i].dtype());
    }
    if (gp[i].shape() != wp[i].shape()) {
      return ::testing::AssertionFailure()
             << names[i] << ": shape " << shape_to_string(gp[i].shape()) << " vs " << shape_to_string(wp[i].shape());
    }
    if (bytes_of(gp[i]) != bytes_of(wp[i])) return ::testing::AssertionFailure() << names[i] << " differ";
  }
  return ::testing::AssertionSuccess();
}

void expect_like_coo_path(const Tensor& x, const Tensor& mask, const std::string& what) {
  Tensor coo = sparse_from_mask(x, mask, "coo");
  EXPECT_TRUE(same_compressed(sparse_from_mask(x, mask, "csr"), coo_to_csr(coo))) << what << " csr";
  EXPECT_TRUE(same_compressed(sparse_from_mask(x, mask, "csc"), coo_to_csc(coo))) << what << " csc";
}

TEST(DenseMaskToCsrTest, KernelIsRegistered) {
  EXPECT_TRUE(Dispatcher::instance().has_kernel("dense_mask_to_csr", DeviceType::kCpu));
}

TEST(DenseMaskToCsrTest, SameAsTheCooPathForEveryDtypeAndShape) {
  uint64_t seed = 1;
  for (DType dtype : kFloatingDtypes) {
    const std::string d(dtype_name(dtype));
    for (double keep : {0.0, 0.3, 1.0}) {
      Input a = random_masked_input({7, 13}, keep, seed++, dtype, {0, 4}, {2});
      expect_like_coo_path(a.x, a.mask, d + " 7x13");
      Input one = random_masked_input({1, 37}, keep, seed++, dtype);
      expect_like_coo_path(one.x, one.mask, d + " 1 row");
      Input wide = random_masked_input({3, 1000}, keep, seed++, dtype, {1});
      expect_like_coo_path(wide.x, wide.mask, d + " wide");
      Input tall = random_masked_input({200, 2}, keep, seed++, dtype);
      expect_like_coo_path(tall.x, tall.mask, d + " tall");
    }
    // Non-contiguous: a transposed view and a strided slice (of x and mask).
    Input a = random_masked_input({9, 16}, 0.5, seed++, dtype, {3});
    expect_like_coo_path(a.x.t(), a.mask.t(), d + " transposed");
    expect_like_coo_path(a.x.slice(1, 1, 16, 3), a.mask.slice(1, 1, 16, 3), d + " strided");
    expect_like_coo_path(a.x.slice(1, 1, 16, 3), a.mask.slice(1, 0, 15, 3).contiguous(), d + " mixed");
    // No rows, no columns.
    Input none = random_masked_input({0, 5}, 0.5, seed++, dtype);
    expect_like_coo_path(none.x, none.mask, d + " 0 rows");
    Input narrow = random_masked_input({4, 0}, 0.5, seed++, dtype);
    expect_like_coo_path(narrow.x, narrow.mask, d + " 0 cols");
  }
}

TEST(DenseMaskToCsrTest, ThresholdGoesThroughItToo) {
  Input a = random_masked_input({6, 10}, 1.0, 42, DType::kF32);
  Tensor x = where(ne(a.x, a.x), zeros({}, a.x.options()), a.x);  // NaN-free: abs(NaN) > t is false anyway
  EXPECT_TRUE(same_compressed(sparse_from_threshold(x, 0.5, "csr"), coo_to_csr(sparse_from_threshold(x, 0.5, "coo"))));
}

TEST(DenseMaskToCsrTest, OpRejectsBadInputs) {
  Tensor x = zeros({2, 3});
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x, zeros({2, 3})}));  // f32 mask
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x, ne(zeros({3, 2}), 0.0)}));
  EXPECT_ANY_THROW(dispatch("dense_mask_to_csr", {x}));
}

}  // namespace
}  // namespace coppice
