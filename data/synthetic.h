// Seeded synthetic datasets for tests and demos. Everything is drawn from
// Philox streams keyed by (seed, kSyntheticPurpose, ...), so a seed gives the
// same data on every machine.
#pragma once

#include <cstdint>
#include <memory>

#include "data/dataset.h"

namespace coppice {

// Gaussian blobs: `classes` centers drawn from N(0, center_scale^2) per
// feature; example i has label y_i drawn uniformly from 0..classes-1 and input
// center[y_i] + spread * N(0, 1). Inputs f32 [n, features], labels i64 [n].
struct BlobsOptions {
  int64_t n = 1000;
  int64_t features = 2;
  int64_t classes = 3;
  double center_scale = 5.0;
  double spread = 1.0;
  uint64_t seed = 0;
};

struct Blobs {
  std::shared_ptr<TensorDataset> dataset;
  Tensor centers;  // f32 [classes, features]
};

// Throws coppice::Error for n < 0, features < 1, classes < 1 or negative scales.
Blobs make_blobs(const BlobsOptions& options = {});
// The bytes the blobs hold (inputs, labels and centers), for refusing a
// dataset larger than memory before drawing it; throws coppice::Error when
// the count overflows int64.
int64_t blobs_bytes(const BlobsOptions& options);

// A random linear teacher: weight [outputs, features] from N(0, 1/features),
// bias [outputs] from N(0, 1), inputs x from N(0, 1), targets
// x W^T + b + noise * N(0, 1). Inputs f32 [n, features], targets f32 [n, outputs].
struct RegressionOptions {
  int64_t n = 1000;
  int64_t features = 8;
  int64_t outputs = 1;
  double noise = 0.1;
  uint64_t seed = 0;
};

struct Regression {
  std::shared_ptr<TensorDataset> dataset;
  Tensor weight;  // f32 [outputs, features]
  Tensor bias;    // f32 [outputs]
};

// Throws coppice::Error for n < 0, features < 1, outputs < 1 or noise < 0.
Regression make_regression(const RegressionOptions& options = {});

}  // namespace coppice
