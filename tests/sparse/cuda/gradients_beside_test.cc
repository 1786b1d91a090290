// A sparse linear's input gradient and its weight's run side by side on
// two streams (autograd/functions/sparse.cc and mlp.cc, through run_beside)
// where no kernel forms them in one pass (linear_grads_fused: 32x32 blocks
// on Hopper; the pin linear_grads=apart keeps them apart everywhere):
// linear's and gelu_mlp's gradients must be the bits of the same ops called
// one after the other on one stream, and the same bits again on a repeat,
// at 32x32, 64x64 and 128x128 blocks, bf16 and f16, with token counts that
// are not a tile's multiple. The ops alone are each deterministic; what
// this checks is that neither side reads or reuses what the other writes.
// Unpinned, where the one pass takes a layer, its gradients are that op's.
#include <string>
#include <tuple>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/sparse.h"
#include "gtest/gtest.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using GradientsBesideTest = SparseCudaTest;

Tensor bsr_on_gpu(int64_t rows, int64_t cols, int64_t block, DType dtype, uint64_t seed) {
  const Tensor dense = random_blocks(rows, cols, block, block, 0.4, seed, {1});
  return to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(block, block)), kCuda);
}

Tensor dense_on_gpu(const Shape& shape, DType dtype, uint64_t seed) {
  return random_dense({shape_numel(shape) / shape.back(), shape.back()}, seed).reshape(shape).to(dtype).to(kCuda);
}

void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << what << ": gradient " << i;
}

// The pins each test runs under: the gradients apart (beside each other), and
// none (the one pass where a kernel takes the layer).
const char* const kRoutes[] = {"linear_grads=apart", ""};

// A layer's input, weight and bias gradients as the autograd node forms them
// under the pins in force (mlp.cc's layer_grads): the one pass where it
// takes them, else the ops one after the other (z: the input's gradient
// through gelu's at z).
LinearGrads layer_grads_alone(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& z = Tensor()) {
  if (route_pins().empty()) {
    LinearGrads fused = autograd_detail::input_and_weight_grads(g2, x2, w, true, z);
    if (fused.weight.defined()) return fused;
  }
  LinearGrads out;
  out.input = z.defined() ? matmul_gelu_backward(g2, w, z).contiguous() : matmul(g2, w);
  std::tie(out.weight, out.bias) = autograd_detail::weight_and_bias_grads(g2, x2, w);
  return out;
}

TEST_F(GradientsBesideTest, LinearsGradientsAreTheOpsOneAfterTheOther) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (const char* route : kRoutes) {
    ScopedRoutePins pins(route);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t block : {32, 64, 128}) {
        for (int64_t tokens : {512, 333}) {
          const std::string what = str_cat(route, " ", dtype_name(dtype), " blocks ", block, " tokens ", tokens);
          const Tensor wv = bsr_on_gpu(384, 256, block, dtype, seed++);
          const Tensor xv = dense_on_gpu({tokens, 256}, dtype, seed++);
          const Tensor bv = dense_on_gpu({1, 384}, dtype, seed++).reshape({384});
          const Tensor g = dense_on_gpu({tokens, 384}, dtype, seed++);
          auto through_autograd = [&] {
            Variable x(xv, true), w(wv, true), b(bv, true);
            linear(x, w, b).backward(g);
            return std::vector<Tensor>{x.grad(), values(w.grad()), b.grad()};
          };
          const std::vector<Tensor> got = through_autograd();
          const LinearGrads want = layer_grads_alone(g, xv, wv);
          expect_same_bits(got, {want.input, values(want.weight), want.bias}, what);
          expect_same_bits(through_autograd(), got, what + " (a repeat)");
        }
      }
    }
  }
}

TEST_F(GradientsBesideTest, GeluMlpsGradientsAreTheOpsOneAfterTheOther) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (const char* route : kRoutes) {
    ScopedRoutePins pins(route);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t block : {32, 64, 128}) {
        const std::string what = str_cat(route, " ", dtype_name(dtype), " blocks ", block);
        const Tensor w1v = bsr_on_gpu(512, 256, block, dtype, seed++), w2v = bsr_on_gpu(256, 512, block, dtype, seed++);
        const Tensor xv = dense_on_gpu({333, 256}, dtype, seed++);
        const Tensor b1v = dense_on_gpu({1, 512}, dtype, seed++).reshape({512});
        const Tensor b2v = dense_on_gpu({1, 256}, dtype, seed++).reshape({256});
        const Tensor g = dense_on_gpu({333, 256}, dtype, seed++);
        auto through_autograd = [&] {
          Variable x(xv, true), w1(w1v, true), b1(b1v, true), w2(w2v, true), b2(b2v, true);
          gelu_mlp(x, w1, b1, w2, b2).backward(g);
          return std::vector<Tensor>{x.grad(), values(w1.grad()), b1.grad(), values(w2.grad()), b2.grad()};
        };
        const std::vector<Tensor> got = through_autograd();
        const auto [a, z] = linear_gelu(xv, w1v, b1v);
        const LinearGrads l2 = layer_grads_alone(g, a, w2v, z), l1 = layer_grads_alone(l2.input, xv, w1v);
        expect_same_bits(got, {l1.input, values(l1.weight), l1.bias, values(l2.weight), l2.bias}, what);
        expect_same_bits(through_autograd(), got, what + " (a repeat)");
      }
    }
  }
}

// The weight's gradient may still be in the making beside the stream when
// the node returns (run_beside leaves its branch open): whatever reads it on
// the device must find it whole. A second backward sums into the leaf's
// gradient, a hook clones what it is given, and a bias reached through an
// op (not a leaf's accumulator) takes the op's backward; each must match
// the ops called one after the other. The shapes are the GPT's projection
// at 32x32, so that the weight's gradient takes long enough for a read
// that does not wait for it to see it unfinished (apart: the one pass makes
// nothing beside).
TEST_F(GradientsBesideTest, WhatReadsAGradientMadeBesideFindsItWhole) {
  SKIP_WITHOUT_CUDA();
  ScopedRoutePins apart("linear_grads=apart");
  const DType dtype = DType::kBF16;
  const Tensor wv = bsr_on_gpu(1024, 1024, 32, dtype, 7);
  const Tensor xv = dense_on_gpu({16384, 1024}, dtype, 8);
  const Tensor bv = dense_on_gpu({1, 1024}, dtype, 9).reshape({1024});
  const Tensor g = dense_on_gpu({16384, 1024}, dtype, 10);
  const auto [gw, gb] = autograd_detail::weight_and_bias_grads(g, xv, wv);
  for (int round = 0; round < 3; ++round) {
    const std::string what = str_cat("round ", round);
    Variable x(xv, true), w(wv, true), b_leaf(bv, true);
    Tensor hooked;
    w.register_hook([&hooked](const Tensor& grad) {
      hooked = values(grad).clone();
      return Tensor();
    });
    for (int pass = 0; pass < 2; ++pass) linear(x, w, mul(b_leaf, 2.0)).backward(g);
    EXPECT_TRUE(same_bits(hooked, values(gw))) << what << ": the hook's gradient";
    EXPECT_TRUE(same_bits(values(w.grad()), add(values(gw), values(gw)))) << what << ": the summed weight gradient";
    const Tensor gb_leaf = mul(gb, 2.0);
    EXPECT_TRUE(same_bits(b_leaf.grad(), add(gb_leaf, gb_leaf))) << what << ": the bias through mul";
  }
}

}  // namespace
}  // namespace coppice
