// CPU-vs-CUDA parity of the sparsifiers' selection kernels
// (sparsifiers/mask_ops.h; CUDA twins in sparsifiers/cuda): the same masks
// bit for bit, ties and NaN included, for the streaming masks and values,
// exact top-k, block scores and n:m groups, and through every built-in
// sparsifier's keep_mask and dense apply. Every test skips without a GPU.
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/sparsifiers/test_util.h"

namespace coppice {
namespace {

using testing_sparsifiers::bits;
using testing_sparsifiers::random_tensor;

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the sparsifier CUDA kernels cannot run here"

const Device kCuda = Device::cuda(0);

// Random values with some ties, a NaN and signed zeros.
Tensor hard_input(const Shape& shape, uint64_t seed, bool ties, DType dtype = DType::kF32) {
  Tensor x = random_tensor(shape, seed, ties, DType::kF64);
  std::vector<double> v = x.to_vector<double>();
  if (v.size() > 5) {
    v[1] = std::numeric_limits<double>::quiet_NaN();
    v[2] = -0.0;
    v[3] = 0.0;
  }
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
}

void expect_same_bits(const Tensor& cpu, const Tensor& gpu) {
  ASSERT_EQ(gpu.device(), kCuda);
  EXPECT_EQ(bits(cpu), bits(gpu.to(Device::cpu())));
}

void expect_same_values(const Tensor& cpu, const Tensor& gpu) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype());
  std::vector<double> a = cpu.to_vector<double>(), b = gpu.to(Device::cpu()).to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) {
      ASSERT_TRUE(std::isnan(b[i])) << i;
    } else {
      ASSERT_EQ(a[i], b[i]) << i;
    }
  }
}

TEST(MaskKernelsCudaTest, StreamingMasksAndValues) {
  SKIP_WITHOUT_CUDA();
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1} << 20}) {
      Tensor x = hard_input({n}, 1 + n, false, d), xg = x.to(kCuda);
      expect_same_bits(sparsify::threshold_mask(x, 1.0, "t"), sparsify::threshold_mask(xg, 1.0, "t"));
      expect_same_values(sparsify::threshold_values(x, 1.0, "t"), sparsify::threshold_values(xg, 1.0, "t"));
      for (double p : {0.0, 0.3, 1.0}) {
        expect_same_bits(sparsify::random_mask(x, p, 11, 5, "r"), sparsify::random_mask(xg, p, 11, 5, "r"));
        expect_same_values(sparsify::random_values(x, p, 11, 5, 1.7, "r"),
                           sparsify::random_values(xg, p, 11, 5, 1.7, "r"));
      }
      if (n > 2) {  // a view one element in: misaligned for vector access, element i is the view's
        Tensor v = x.narrow(0, 1, n - 1), vg = xg.narrow(0, 1, n - 1);
        expect_same_values(sparsify::threshold_values(v, 1.0, "t"), sparsify::threshold_values(vg, 1.0, "t"));
        expect_same_bits(sparsify::random_mask(v, 0.3, 11, 5, "r"), sparsify::random_mask(vg, 0.3, 11, 5, "r"));
        expect_same_values(sparsify::random_values(v, 0.3, 11, 5, 2.0, "r"),
                           sparsify::random_values(vg, 0.3, 11, 5, 2.0, "r"));
      }
    }
  }
}

TEST(MaskKernelsCudaTest, TopkMask) {
  SKIP_WITHOUT_CUDA();
  for (DType d : {DType::kF32, DType::kF64}) {
    for (bool ties : {false, true}) {
      for (const Shape& shape : std::vector<Shape>{{1}, {9}, {31, 17}, {1 << 20}}) {
        Tensor x = hard_input(shape, 7, ties, d), xg = x.to(kCuda);
        for (double s : {0.0, 0.1, 0.5, 0.9, 0.999, 1.0}) {
          const int64_t k = kept_count(s, x.numel());
          for (bool magnitude : {true, false}) {
            SCOPED_TRACE(shape_to_string(shape) + " k=" + std::to_string(k));
            expect_same_bits(sparsify::topk_mask(x, k, magnitude, "k"), sparsify::topk_mask(xg, k, magnitude, "k"));
          }
        }
      }
    }
  }
}

TEST(MaskKernelsCudaTest, BlockScores) {
  SKIP_WITHOUT_CUDA();
  for (DType d : {DType::kF32, DType::kF64}) {
    for (auto [r, c, bh, bw] :
         std::vector<std::array<int64_t, 4>>{{64, 48, 8, 4}, {1024, 1024, 32, 32}, {6, 9, 3, 1}}) {
      Tensor x = hard_input({r, c}, 3, false, d).to(d);
      x = where(ne(x, x), zeros({}, x.options()), x);  // no NaN: scores stay comparable values
      for (bool l1 : {false, true}) {
        expect_same_values(sparsify::block_scores(x, bh, bw, l1, "b"),
                           sparsify::block_scores(x.to(kCuda), bh, bw, l1, "b"));
      }
    }
  }
}

// The block scores of a bf16 product formed in chunks on the device (the
// mask updater's gradient scores): cuBLAS against the CPU's product, bf16
// rounding of each product entry allowed for.
TEST(MaskKernelsCudaTest, ProductBlockScores) {
  SKIP_WITHOUT_CUDA();
  const Tensor a = random_tensor({96, 256}, 5).to(DType::kBF16).t();  // [256, 96], strided
  const Tensor b = random_tensor({96, 128}, 6).to(DType::kBF16);
  const Tensor cpu = sparsify::product_block_scores({{a, b}}, 32, 32, "t", 64);
  const Tensor gpu = sparsify::product_block_scores({{a.to(kCuda), b.to(kCuda)}}, 32, 32, "t", 64);
  ASSERT_EQ(gpu.device(), kCuda);
  EXPECT_TRUE(allclose(gpu.to(Device::cpu()), cpu, 2e-2, 0.0));
}

TEST(MaskKernelsCudaTest, NmMask) {
  SKIP_WITHOUT_CUDA();
  for (DType d : {DType::kF32, DType::kF64}) {
    for (bool ties : {false, true}) {
      Tensor x = hard_input({16, 32, 48}, 5, ties, d), xg = x.to(kCuda);
      for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {1, 4}, {3, 8}, {4, 8}, {5, 16}}) {
        for (int64_t dim : {-1, 0, 1}) {
          expect_same_bits(sparsify::nm_mask(x, n, m, dim, "nm"), sparsify::nm_mask(xg, n, m, dim, "nm"));
        }
      }
    }
  }
}

TEST(MaskKernelsCudaTest, EveryBuiltinGivesTheSameMaskAndDenseOutput) {
  SKIP_WITHOUT_CUDA();
  Tensor x = hard_input({256, 512}, 9, true), xg = x.to(kCuda);
  Tensor g = random_tensor({256, 512}, 10);
  auto movement_cpu = std::make_shared<MovementSparsifier>(0.8);
  auto movement_gpu = std::make_shared<MovementSparsifier>(0.8);
  for (int step = 0; step < 3; ++step) {
    movement_cpu->accumulate(x, g);
    movement_gpu->accumulate(xg, g.to(kCuda));
  }
  std::vector<std::pair<SparsifierPtr, SparsifierPtr>> pairs = {
      {std::make_shared<ThresholdSparsifier>(1.0), nullptr},
      {std::make_shared<RandomFractionSparsifier>(0.6, true), nullptr},
      {std::make_shared<MagnitudeFractionSparsifier>(0.9), nullptr},
      {std::make_shared<BlockMagnitudeSparsifier>(0.75, 16, 32), nullptr},
      {std::make_shared<BlockMagnitudeSparsifier>(0.5, 4, 4, BlockNorm::kL1), nullptr},
      {std::make_shared<NmSparsifier>(2, 4), nullptr},
      {movement_cpu, movement_gpu}};
  const SparsifyContext ctx{1, 2, 3, 4};
  OutputFormat dense;
  for (auto& [cpu, gpu] : pairs) {
    if (!gpu) gpu = cpu;
    SCOPED_TRACE(cpu->describe());
    Tensor xc = x;
    if (dynamic_cast<BlockMagnitudeSparsifier*>(cpu.get())) xc = where(ne(x, x), zeros({}, x.options()), x);
    expect_same_bits(cpu->keep_mask(xc, ctx), gpu->keep_mask(xc.to(kCuda), ctx));
    expect_same_values(cpu->apply(xc, dense, ctx), gpu->apply(xc.to(kCuda), dense, ctx));
    OutputFormat csr;
    csr.name = "csr";
    Tensor yg = gpu->apply(xc.to(kCuda), csr, ctx);
    EXPECT_EQ(yg.device(), kCuda);
    expect_same_values(to_dense(cpu->apply(xc, csr, ctx)), to_dense(yg));
  }
}

}  // namespace
}  // namespace coppice
