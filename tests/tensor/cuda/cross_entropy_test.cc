// The fused CUDA cross-entropy (tensor/cuda/cross_entropy.cu) against the
// composite it replaces, which runs on the CPU: loss and gradient, every
// reduction, label smoothing, ignored targets, class counts below, at and
// above a warp, every floating dtype, and the out-of-range target error.
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Tensor targets(int64_t n, int64_t c, uint64_t seed, bool with_ignored) {
  std::vector<double> t = noise(n, seed, 0, static_cast<double>(c));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = std::floor(t[i]);
    if (t[i] >= static_cast<double>(c)) t[i] = static_cast<double>(c - 1);
    if (with_ignored && i % 5 == 1) t[i] = -100;
  }
  return make({n}, t, DType::kI64);
}

TEST(CudaCrossEntropyTest, LossAndGradientMatchTheComposite) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dtype : floating_dtypes()) {
    const Tol tol = dtype == DType::kF32 ? Tol{1e-5, 1e-6} : math_tol(dtype);
    for (int64_t c : {1, 10, 32, 100}) {
      for (Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
        for (double smoothing : {0.0, 0.1}) {
          for (bool ignored : {false, true}) {
            const int64_t n = 37;
            const Tensor z = random({n, c}, dtype, seed++, -4, 4);
            const Tensor t = targets(n, c, seed++, ignored);
            CrossEntropyOptions o;
            o.reduction = reduction;
            o.label_smoothing = smoothing;
            const std::string what = str_cat(dtype_name(dtype), " c ", c, " reduction ", static_cast<int>(reduction),
                                             " smoothing ", smoothing, ignored ? " ignored" : "");
            expect_match(cross_entropy(z.to(gpu()), t.to(gpu()), o).to(Device::cpu()), cross_entropy(z, t, o),
                         tol.rtol * 4, tol.atol * 4, "loss " + what);
            const Tensor g = reduction == Reduction::kNone ? random({n}, dtype, seed++) : make({}, {0.7}, dtype);
            expect_match(cross_entropy_backward(z.to(gpu()), t.to(gpu()), g.to(gpu()), o).to(Device::cpu()),
                         cross_entropy_backward(z, t, g, o), tol.rtol * 4, tol.atol * 4, "gradient " + what);
          }
        }
      }
    }
  }
}

TEST(CudaCrossEntropyTest, EveryTargetIgnoredGivesTheCompositesResult) {
  COPPICE_REQUIRE_GPU();
  const Tensor z = random({4, 3}, DType::kF32, 9);
  const Tensor t = make({4}, {-100, -100, -100, -100}, DType::kI64);
  expect_match(cross_entropy(z.to(gpu()), t.to(gpu())).to(Device::cpu()), cross_entropy(z, t), 0, 0, "mean of none");
  const Tensor g = make({}, {1.0}, DType::kF32);
  expect_match(cross_entropy_backward(z.to(gpu()), t.to(gpu()), g.to(gpu())).to(Device::cpu()),
               cross_entropy_backward(z, t, g), 0, 1e-300, "zero gradient (the sign of a zero may differ)");
}

TEST(CudaCrossEntropyTest, OutOfRangeTargetIsRefused) {
  COPPICE_REQUIRE_GPU();
  const Tensor z = random({3, 4}, DType::kF32, 10).to(gpu());
  expect_error(
      [&] {
        (void)cross_entropy(z, make({3}, {0, 4, 1}, DType::kI64).to(gpu())).item();
      },
      "cross_entropy: a target is not a class index in [0, 4) nor ignore_index (-100): cross_entropy: index 4 "
      "(at position 1)");
}

}  // namespace
}  // namespace coppice
