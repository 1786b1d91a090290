// A residual stream's add in a BSR product's write-out (tensor's
// linear_add_fused: sparse/cuda/bsr_wgmma.cu and bsr_wgmma32.cu add r after
// rounding the product): the bits of add(r, linear(x, W, b)) where the
// wgmma kernels of 32x32, 64x64 and 128x128 blocks run (Hopper), and
// undefined (nothing run) where no kernel adds it: f32, a pattern with no
// block, the mma.sync route. linear_residual and gelu_mlp_residual: the sum
// and every gradient equal to the composite's; the stream left pending
// where the add is declined. A bad residual is named. A GPT whose block
// linears are BSR 32x32 or 64x64 runs its stream's adds in the write-outs
// (on Hopper) with the logits and gradients of the same run with them
// pinned apart (each add in the next norm's pass).
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "gtest/gtest.h"
#include "models/gpt.h"
#include "sparse/ops.h"
#include "sparse/route_choices.h"
#include "tensor/cuda/stream.h"
#include "tests/sparse/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using ResidualProductsTest = SparseCudaTest;

bool hopper() { return cuda::runs_sm90a(0, "residual_products_test"); }

// W [256, 256] of `block` blocks at `density`, block row 1 empty, on the GPU.
Tensor bsr_weight(int64_t block, double density, DType dtype, uint64_t seed) {
  const Tensor dense = random_blocks(256, 256, block, block, density, seed, {1});
  return to_device(to_format(dense.to(dtype), "bsr", FormatOptions::block(block, block)), kCuda);
}

Tensor on_gpu(const Shape& shape, DType dtype, uint64_t seed) {
  return random_dense({shape_numel(shape) / shape.back(), shape.back()}, seed).reshape(shape).to(dtype).to(kCuda);
}

TEST_F(ResidualProductsTest, LinearAddIsTheCompositeInOneKernel) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t block : {32, 64, 128}) {
      // Tokens: a tile's multiple, one row past one, one token, and 3-D rows.
      for (const Shape& xs : {Shape{256, 256}, Shape{129, 256}, Shape{1, 256}, Shape{2, 45, 256}}) {
        for (bool with_bias : {true, false}) {
          const Tensor w = bsr_weight(block, 0.4, dtype, seed++);
          const Tensor x = on_gpu(xs, dtype, seed++), r = on_gpu(xs, dtype, seed++);
          const Tensor b = with_bias ? on_gpu({1, 256}, dtype, seed++).reshape({256}) : Tensor();
          const std::string what = str_cat(dtype_name(dtype), " blocks ", block, " x ", shape_to_string(xs),
                                           with_bias ? " with bias" : " without bias");
          const Tensor got = linear_add_fused(x, w, b, r);
          // (A pattern with no stored block launches no kernel: declined too.)
          ASSERT_EQ(got.defined(), hopper() && values(w).size(0) > 0) << what;
          if (!got.defined()) continue;
          EXPECT_TRUE(same_bits(got, add(r, linear(x, w, b)))) << what;
          EXPECT_TRUE(same_bits(linear_add_fused(x, w, b, r), got)) << what << ": a repeat";
        }
      }
    }
  }
}

TEST_F(ResidualProductsTest, DeclinedWhereNoKernelAddsIt) {
  SKIP_WITHOUT_CUDA();
  const Tensor x = on_gpu({128, 256}, DType::kBF16, 1), r = on_gpu({128, 256}, DType::kBF16, 2);
  // No stored block, f32 weights.
  EXPECT_FALSE(linear_add_fused(x, bsr_weight(32, 0.0, DType::kBF16, 3), Tensor(), r).defined());
  EXPECT_FALSE(linear_add_fused(x, bsr_weight(64, 0.0, DType::kBF16, 4), Tensor(), r).defined());
  const Tensor x32 = x.to(DType::kF32), r32 = r.to(DType::kF32);
  EXPECT_FALSE(linear_add_fused(x32, bsr_weight(64, 0.4, DType::kF32, 5), Tensor(), r32).defined());
  // The mma.sync kernels, pinned; the add pinned apart.
  for (const char* pin : {"bsr_tiles=mma_sync", "residual_add=apart"}) {
    ScopedRoutePins pins(pin);
    EXPECT_FALSE(linear_add_fused(x, bsr_weight(64, 0.4, DType::kBF16, 6), Tensor(), r).defined()) << pin;
  }
  // A dense weight and the CPU have no kernel at all.
  EXPECT_FALSE(linear_add_fused(x, on_gpu({256, 256}, DType::kBF16, 7), Tensor(), r).defined());
  const Tensor wc =
      to_format(random_blocks(256, 256, 64, 64, 0.4, 8).to(DType::kF32), "bsr", FormatOptions::block(64, 64));
  EXPECT_FALSE(linear_add_fused(x32.to(Device::cpu()), wc, Tensor(), r32.to(Device::cpu())).defined());
}

TEST_F(ResidualProductsTest, BadResidualIsNamed) {
  SKIP_WITHOUT_CUDA();
  const Tensor w = bsr_weight(64, 0.4, DType::kBF16, 9), x = on_gpu({128, 256}, DType::kBF16, 10);
  auto message = [&](const Tensor& r) {
    try {
      linear_add_fused(x, w, Tensor(), r);
    } catch (const Error& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  EXPECT_NE(message(on_gpu({128, 128}, DType::kBF16, 11)).find("the residual must have the product's shape [128, 256]"),
            std::string::npos);
  EXPECT_NE(message(on_gpu({128, 256}, DType::kF16, 12)).find("the residual has dtype f16"), std::string::npos);
  EXPECT_NE(message(on_gpu({128, 256}, DType::kBF16, 13).to(Device::cpu())).find("linear_add"), std::string::npos);
}

// linear_residual and gelu_mlp_residual against h + the composite: the
// stream's value and every gradient the same bits, with the add in the
// write-out (on Hopper) or pending (elsewhere).
TEST_F(ResidualProductsTest, StreamsMatchTheComposite) {
  SKIP_WITHOUT_CUDA();
  for (int64_t block : {32, 64}) {
    const DType dtype = DType::kBF16;
    const Tensor w1v = to_device(to_format(random_blocks(512, 256, block, block, 0.4, 20 + block, {1}).to(dtype), "bsr",
                                           FormatOptions::block(block, block)),
                                 kCuda);
    const Tensor w2v = bsr_weight(block, 0.4, dtype, 30 + block);
    const Tensor w3v = to_device(to_format(random_blocks(256, 512, block, block, 0.4, 40 + block).to(dtype), "bsr",
                                           FormatOptions::block(block, block)),
                                 kCuda);
    const Tensor xv = on_gpu({2, 45, 256}, dtype, 50), hv = on_gpu({2, 45, 256}, dtype, 51);
    const Tensor b1v = on_gpu({1, 512}, dtype, 52).reshape({512}), b2v = on_gpu({1, 256}, dtype, 53).reshape({256});
    const Tensor g = on_gpu({2, 45, 256}, dtype, 54);
    for (bool mlp : {false, true}) {
      auto run = [&](bool streamed) {
        Variable x(xv, true), h(hv, true), w1(w1v, true), b1(b1v, true), w2(w2v, true), b2(b2v, true), w3(w3v, true);
        Variable y;
        if (streamed) {
          const ResidualStream s = mlp ? gelu_mlp_residual(h, x, w1, b1, w3, b2) : linear_residual(h, x, w2, b2);
          EXPECT_EQ(s.pending.defined(), !hopper()) << "blocks " << block << (mlp ? " mlp" : "");
          y = s.pending.defined() ? add(s.h, s.pending) : s.h;
        } else {
          y = add(h, mlp ? gelu_mlp(x, w1, b1, w3, b2) : linear(x, w2, b2));
        }
        y.backward(g);
        std::vector<Tensor> out{y.value(), x.grad(), h.grad(), b2.grad()};
        out.push_back(values(mlp ? w3.grad() : w2.grad()));
        if (mlp) out.insert(out.end(), {values(w1.grad()), b1.grad()});
        return out;
      };
      const std::vector<Tensor> streamed = run(true), composite = run(false);
      for (size_t i = 0; i < streamed.size(); ++i) {
        EXPECT_TRUE(same_bits(streamed[i], composite[i]))
            << "blocks " << block << (mlp ? " mlp" : "") << " output " << i;
      }
    }
  }
}

TEST_F(ResidualProductsTest, GptStreamAddsInTheWriteOutsWithTheSameBits) {
  SKIP_WITHOUT_CUDA();
  for (int64_t block : {32, 64}) {
    GPTOptions o;
    o.vocab_size = 64;
    o.context = 128;
    o.dim = 256;
    o.layers = 2;
    o.heads = 2;
    o.mlp_hidden = 512;
    Generator gen(7);
    GPT model(o, LayerOptions{DType::kBF16, kCuda}, gen);
    int sparse = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      const bool block_linear = name.find("blocks.") == 0 && name.size() > 7 &&
                                name.compare(name.size() - 7, 7, ".weight") == 0 && p.value().dim() == 2;
      if (!block_linear) continue;
      const Tensor w = p.value();
      const Tensor keep =
          random_blocks(w.size(0), w.size(1), block, block, 0.5, 60 + sparse, {1}).to(DType::kBF16).to(kCuda);
      const Tensor masked = mul(w, ne(keep, 0.0).to(DType::kBF16));
      model.set_parameter(name, Variable(to_format(masked, "bsr", FormatOptions::block(block, block)), true, name));
      ++sparse;
    }
    ASSERT_EQ(sparse, 8);  // qkv, proj, fc1, fc2 of each block
    Generator tg(8);
    const Tensor ids = randint(0, 64, {2, 128}, DType::kI64, tg).to(kCuda);
    const Tensor seed = randn({2, 128, 64}, DType::kF32, tg).to(DType::kBF16).to(kCuda);
    auto run = [&]() {
      model.zero_grad();
      Variable logits = model.forward(Variable(ids));
      logits.backward(seed);
      std::vector<Tensor> out = {logits.value()};
      for (const auto& [name, p] : model.named_parameters()) {
        out.push_back(p.grad().is_sparse() ? values(p.grad()).clone() : p.grad().clone());
      }
      return out;
    };
    const std::vector<Tensor> streamed = run();
    std::vector<Tensor> apart;
    {
      ScopedRoutePins pins("residual_add=apart");
      apart = run();
    }
    ASSERT_EQ(streamed.size(), apart.size());
    for (size_t i = 0; i < streamed.size(); ++i) {
      EXPECT_TRUE(same_bits(streamed[i], apart[i])) << "blocks " << block << " result " << i;
    }
  }
}

}  // namespace
}  // namespace coppice
