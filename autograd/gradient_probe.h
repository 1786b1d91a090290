// The whole gradient of a sparse weight without forming it densely.
//
// RigL-style growth ranks a weight's gradient at every position, pruned ones
// included, but backward computes it only at the stored ones: the products
// of functions/sparse.h get a sparse operand S's gradient by an SDDMM, the
// product a @ b sampled at S's pattern. While a GradientProbe is open, each
// of those backward functions also hands the factors (a, b) to the probe when
// S is a weight the probe watches. The weight's gradient at every position
// is then the sum of a_i @ b_i over the pairs it collected, which the mask
// updater reduces to per-block scores a chunk of rows at a time
// (sparsifiers/mask_ops.h: product_block_scores) instead of materializing a
// dense gradient.
//
// A watched weight is recognised by its value tensor (Tensor::is_same): it
// must reach the product as the parameter itself. A weight whose gradient
// came through any other op (mul by a dense tensor, values(), a sparsifier
// that builds a new tensor) offers no factors, and the probe's user must
// refuse it (offers() says how many it saw). The factors stay alive until
// the probe closes: on the steps that open one, backward keeps each
// watched layer's output gradient and input a little longer.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

class GradientProbe {
 public:
  using Factors = std::vector<std::pair<Tensor, Tensor>>;

  // Opens the probe for the backward passes run on this thread; one may be
  // open at a time per thread (throws otherwise).
  GradientProbe();
  ~GradientProbe();
  GradientProbe(const GradientProbe&) = delete;
  GradientProbe& operator=(const GradientProbe&) = delete;

  // Watches the sparse weight whose value is `weight`, under `name`.
  void watch(const std::string& name, const Tensor& weight);
  // The factor pairs offered for `name` so far (empty when none).
  const Factors& factors(const std::string& name) const;

  // Called by backward functions: `pattern`'s gradient at every position
  // includes a @ b. Does nothing unless this thread's open probe watches
  // `pattern`.
  static void offer(const Tensor& pattern, const Tensor& a, const Tensor& b);

 private:
  struct Watched {
    Tensor weight;
    Factors factors;
  };
  mutable std::mutex mu_;
  std::map<std::string, Watched> watched_;
};

}  // namespace coppice
