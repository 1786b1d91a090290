// Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017) from the Debian package
// dataset-fashion-mnist: 28x28 grey images of 10 kinds of clothing, 60000 for
// training and 10000 for testing, as gzipped IDX files.
//
// Images become f32 [N, 1, 28, 28] (or [N, 784] with flatten), scaled to
// [0, 1] and then, by default, normalized as (x - mean) / std with the
// training set's mean 0.2860 and std 0.3530; labels become i64 [N] in 0..9.
// Bad files give an error Status naming the file and what is wrong.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace coppice {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kFashionMnistTrainSize = 60000;
inline constexpr int64_t kFashionMnistTestSize = 10000;
inline constexpr int64_t kFashionMnistClasses = 10;
inline constexpr int64_t kFashionMnistSide = 28;  // images are 1 x 28 x 28
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;
// The class of each label value.
inline constexpr std::array<const char*, 10> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

enum class FashionMnistSplit { kTrain, kTest };

struct FashionMnistOptions {
  std::string dir = kFashionMnistDir;  // holds {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz
  bool flatten = false;                // [N, 784] instead of [N, 1, 28, 28]
  bool normalize = true;               // (x - mean) / std after scaling to [0, 1]
  double mean = kFashionMnistMean;
  double std = kFashionMnistStd;  // must be > 0
};

// The image and label file paths of `split` under `dir`.
std::string fashion_mnist_images_path(const std::string& dir, FashionMnistSplit split);
std::string fashion_mnist_labels_path(const std::string& dir, FashionMnistSplit split);

// Loads one split and checks it has the official number of examples.
absl::StatusOr<std::shared_ptr<TensorDataset>> load_fashion_mnist(FashionMnistSplit split,
                                                                  const FashionMnistOptions& options = {});

// Loads any pair of IDX files in the Fashion-MNIST (and MNIST) layout: images
// u8 [N, H, W] (magic 0x00000803), labels u8 [N] (magic 0x00000801) in
// [0, num_classes). Only options.flatten/normalize/mean/std are used.
absl::StatusOr<std::shared_ptr<TensorDataset>> load_idx_classification(const std::string& images_path,
                                                                       const std::string& labels_path,
                                                                       const FashionMnistOptions& options = {},
                                                                       int64_t num_classes = kFashionMnistClasses);

}  // namespace coppice
