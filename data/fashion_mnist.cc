#include "data/fashion_mnist.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "data/idx.h"

namespace coppice {
namespace {

const char* split_prefix(FashionMnistSplit split) { return split == FashionMnistSplit::kTrain ? "train" : "t10k"; }

}  // namespace

std::string fashion_mnist_images_path(const std::string& dir, FashionMnistSplit split) {
  return str_cat(dir, "/", split_prefix(split), "-images-idx3-ubyte.gz");
}

std::string fashion_mnist_labels_path(const std::string& dir, FashionMnistSplit split) {
  return str_cat(dir, "/", split_prefix(split), "-labels-idx1-ubyte.gz");
}

absl::StatusOr<std::shared_ptr<TensorDataset>> load_idx_classification(const std::string& images_path,
                                                                       const std::string& labels_path,
                                                                       const FashionMnistOptions& options,
                                                                       int64_t num_classes) {
  if (options.normalize && !(options.std > 0.0 && std::isfinite(options.std) && std::isfinite(options.mean))) {
    return absl::InvalidArgumentError(str_cat("load ", images_path,
                                              ": normalization needs a finite mean and std > 0, got mean ",
                                              options.mean, " std ", options.std));
  }
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        str_cat("load ", labels_path, ": num_classes must be in [1, 256] (u8 labels), got ", num_classes));
  }
  absl::StatusOr<IdxArray> labels = read_idx(labels_path);
  if (!labels.ok()) return labels.status();
  if (labels->type != IdxType::kU8 || labels->dims.size() != 1) {
    return absl::InvalidArgumentError(str_cat("idx ", labels_path,
                                              ": expected a labels file, u8 [N] (magic 0x00000801), got ",
                                              idx_type_name(labels->type), " ", shape_to_string(labels->dims)));
  }
  absl::StatusOr<IdxArray> images = read_idx(images_path);
  if (!images.ok()) return images.status();
  if (images->type != IdxType::kU8 || images->dims.size() != 3 || images->dims[1] < 1 || images->dims[2] < 1) {
    return absl::InvalidArgumentError(
        str_cat("idx ", images_path, ": expected an images file, u8 [N, H, W] with H, W >= 1 (magic 0x00000803), got ",
                idx_type_name(images->type), " ", shape_to_string(images->dims)));
  }
  const int64_t n = images->dims[0];
  if (labels->dims[0] != n) {
    return absl::InvalidArgumentError(
        str_cat("idx ", labels_path, ": ", labels->dims[0], " labels for the ", n, " images of ", images_path));
  }
  const auto* lab = reinterpret_cast<const unsigned char*>(labels->data.data());
  Tensor targets = Tensor::empty({n}, DType::kI64);
  int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] >= num_classes) {
      return absl::InvalidArgumentError(str_cat("idx ", labels_path, ": label ", int{lab[i]}, " of example ", i,
                                                " is outside [0, ", num_classes, ")"));
    }
    t[i] = lab[i];
  }
  const int64_t h = images->dims[1], w = images->dims[2];
  Tensor inputs = Tensor::empty(options.flatten ? Shape{n, h * w} : Shape{n, 1, h, w}, DType::kF32);
  // One table lookup per pixel: 256 possible values.
  float table[256];
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    table[v] = static_cast<float>(options.normalize ? (x - options.mean) / options.std : x);
  }
  const auto* px = reinterpret_cast<const unsigned char*>(images->data.data());
  float* out = inputs.data<float>();
  const int64_t total = images->numel();
  for (int64_t i = 0; i < total; ++i) out[i] = table[px[i]];
  return std::make_shared<TensorDataset>(std::move(inputs), std::move(targets), str_cat("idx dataset ", images_path));
}

absl::StatusOr<std::shared_ptr<TensorDataset>> load_fashion_mnist(FashionMnistSplit split,
                                                                  const FashionMnistOptions& options) {
  const std::string images = fashion_mnist_images_path(options.dir, split);
  absl::StatusOr<std::shared_ptr<TensorDataset>> ds =
      load_idx_classification(images, fashion_mnist_labels_path(options.dir, split), options);
  if (!ds.ok()) return ds.status();
  const int64_t want = split == FashionMnistSplit::kTrain ? kFashionMnistTrainSize : kFashionMnistTestSize;
  const Shape& shape = (*ds)->inputs().shape();
  const int64_t pixels = shape_numel(shape) / std::max<int64_t>(shape[0], 1);
  if ((*ds)->size() != want || pixels != 28 * 28) {
    return absl::InvalidArgumentError(str_cat("fashion-mnist ", images, ": expected ", want, " images of 28x28, got ",
                                              (*ds)->size(), " of ", pixels, " pixels"));
  }
  return std::make_shared<TensorDataset>(
      (*ds)->inputs(), (*ds)->targets(),
      split == FashionMnistSplit::kTrain ? "Fashion-MNIST train" : "Fashion-MNIST test");
}

}  // namespace coppice
