#include "data/synthetic.h"

#include <cmath>
#include <utility>

#include "data/permutation.h"
#include "tensor/checked_math.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Stream `what` of the synthetic data under `seed`.
Generator stream(uint64_t seed, uint64_t what) { return Generator::keyed(seed, kSyntheticPurpose, what, 0); }

}  // namespace

Blobs make_blobs(const BlobsOptions& o) {
  COPPICE_CHECK(o.n >= 0 && o.features >= 1 && o.classes >= 1,
                "make_blobs: need n >= 0, features >= 1, classes >= 1; got n ", o.n, ", features ", o.features,
                ", classes ", o.classes);
  COPPICE_CHECK(o.center_scale >= 0.0 && o.spread >= 0.0, "make_blobs: center_scale and spread must be >= 0, got ",
                o.center_scale, " and ", o.spread);
  Generator g_centers = stream(o.seed, 0), g_labels = stream(o.seed, 1), g_noise = stream(o.seed, 2);
  Tensor centers = mul(randn({o.classes, o.features}, DType::kF32, g_centers), o.center_scale);
  Tensor labels = randint(0, o.classes, {o.n}, DType::kI64, g_labels);
  Tensor inputs = add(index_select(centers, 0, labels), mul(randn({o.n, o.features}, DType::kF32, g_noise), o.spread));
  return {std::make_shared<TensorDataset>(std::move(inputs), std::move(labels), "blobs"), std::move(centers)};
}

int64_t blobs_bytes(const BlobsOptions& o) {
  auto what = [&] { return str_cat("make_blobs: bytes of ", o.n, " examples of ", o.features, " features"); };
  const int64_t per_example =
      checked_add(checked_mul(o.features, int64_t{4}, what), int64_t{8}, what);  // f32 + i64 label
  const int64_t centers = checked_mul(checked_mul(o.classes, o.features, what), int64_t{4}, what);
  return checked_add(checked_mul(o.n, per_example, what), centers, what);
}

Regression make_regression(const RegressionOptions& o) {
  COPPICE_CHECK(o.n >= 0 && o.features >= 1 && o.outputs >= 1,
                "make_regression: need n >= 0, features >= 1, outputs >= 1; got n ", o.n, ", features ", o.features,
                ", outputs ", o.outputs);
  COPPICE_CHECK(o.noise >= 0.0, "make_regression: noise must be >= 0, got ", o.noise);
  Generator g_weight = stream(o.seed, 10), g_bias = stream(o.seed, 11), g_x = stream(o.seed, 12),
            g_noise = stream(o.seed, 13);
  Tensor weight = mul(randn({o.outputs, o.features}, DType::kF32, g_weight), 1.0 / std::sqrt(double(o.features)));
  Tensor bias = randn({o.outputs}, DType::kF32, g_bias);
  Tensor x = randn({o.n, o.features}, DType::kF32, g_x);
  Tensor y = add(linear(x, weight, bias), mul(randn({o.n, o.outputs}, DType::kF32, g_noise), o.noise));
  return {std::make_shared<TensorDataset>(std::move(x), std::move(y), "regression"), std::move(weight),
          std::move(bias)};
}

}  // namespace coppice
