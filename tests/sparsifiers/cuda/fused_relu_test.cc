// CPU-vs-CUDA parity of the fused relu-into-CSR kernel (sparsifiers/fused_relu.h;
// CUDA twin in sparsifiers/cuda/relu_to_csr.cu): the same row pointers, column
// indices and values bit for bit, for every floating dtype, exact-threshold
// ties, empty and all-kept rows, one row, wide, narrow, unaligned and
// non-contiguous inputs; the same gradient; sparsified_relu on CUDA giving the
// generic path's value and gradient; and the refused inputs. Every test skips
// without a GPU.
#include "sparsifiers/fused_relu.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tests/sparsifiers/test_util.h"

namespace coppice {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the relu_to_csr CUDA kernel cannot run here"

const Device kCuda = Device::cuda(0);
const std::vector<DType> kDtypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

std::vector<int64_t> ints(const Tensor& t) { return t.to(Device::cpu()).to(DType::kI64).to_vector<int64_t>(); }
std::vector<double> doubles(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64).to_vector<double>(); }

// N(0, 1) in `dtype`, with exact ties: every 7th entry equals the threshold
// as `dtype` rounds it. Row 0 (when there are 3 rows or more) is all ties,
// row 1 all negative (empty), row 2 all above the threshold (all kept).
Tensor tie_input(const Shape& shape, double threshold, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double tie = from_vector<double>({threshold}, {1}).to(dtype).to(DType::kF64).to_vector<double>()[0];
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 3 ? tie : normal(rng);
  for (int64_t c = 0; c < cols && rows >= 3; ++c) {
    v[static_cast<size_t>(c)] = tie;
    v[static_cast<size_t>(cols + c)] = -1.0 - std::abs(normal(rng));
    v[static_cast<size_t>(2 * cols + c)] = threshold + 1.0 + std::abs(normal(rng));
  }
  return from_vector(v, shape, TensorOptions(DType::kF64)).to(dtype);
}

// The CUDA result equals the CPU twin's bit for bit, and the CPU twin keeps
// what the generic path keeps (the threshold sparsifier on relu's output).
void expect_parity(const Tensor& x_cpu, const Tensor& x_gpu, double threshold, const std::string& what) {
  SCOPED_TRACE(what);
  Tensor c = relu_to_csr(Variable(x_cpu), threshold).value();
  Tensor g = relu_to_csr(Variable(x_gpu), threshold).value();
  ASSERT_EQ(g.device(), kCuda);
  ASSERT_EQ(std::string(g.format()), "csr");
  ASSERT_EQ(g.dtype(), x_cpu.dtype());
  const CompressedImpl& ci = csr_impl(c, "test");
  const CompressedImpl& gi = csr_impl(g, "test");
  EXPECT_EQ(gi.pointers().dtype(), DType::kI32);
  EXPECT_EQ(gi.indices().dtype(), DType::kI32);
  EXPECT_EQ(ints(gi.pointers()), ints(ci.pointers()));
  EXPECT_EQ(ints(gi.indices()), ints(ci.indices()));
  EXPECT_EQ(doubles(gi.values()), doubles(ci.values()));
  Tensor generic = sparsify::threshold_mask(relu(x_cpu.contiguous()), threshold, "test");
  EXPECT_EQ(nnz(c), testing_sparsifiers::count(generic));
  EXPECT_EQ(doubles(to_dense(c)), doubles(where(generic, relu(x_cpu), zeros_like(x_cpu))));
}

TEST(FusedReluCuda, ParityWithCpuTwin) {
  SKIP_WITHOUT_CUDA();
  // Narrow, odd (no vector loads), 16-byte rows, wide, one row, one column, empty.
  const std::vector<Shape> shapes = {{7, 37}, {9, 64},   {3, 4099}, {1, 1000}, {1, 1},
                                     {33, 1}, {64, 128}, {0, 5},    {4, 0}};
  uint64_t seed = 1;
  for (DType dtype : kDtypes) {
    for (const Shape& shape : shapes) {
      for (double threshold : {0.0, 0.1, 0.5, 1.0}) {
        Tensor x = tie_input(shape, threshold, dtype, seed++);
        expect_parity(x, x.to(kCuda), threshold,
                      str_cat(dtype_name(dtype), " ", shape_to_string(shape), " t=", threshold));
      }
    }
  }
}

TEST(FusedReluCuda, UnalignedAndStridedInputs) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : kDtypes) {
    Tensor base = tie_input({17, 65}, 0.25, dtype, 99);
    Tensor base_gpu = base.to(kCuda);
    // Starts one element past a 16-byte boundary: the scalar path.
    expect_parity(base.narrow(1, 1, 64), base_gpu.narrow(1, 1, 64), 0.25, str_cat(dtype_name(dtype), " narrowed"));
    expect_parity(base.reshape({-1}).narrow(0, 1, 16 * 64).reshape({16, 64}),
                  base_gpu.reshape({-1}).narrow(0, 1, 16 * 64).reshape({16, 64}), 0.25,
                  str_cat(dtype_name(dtype), " offset"));
    expect_parity(base.t(), base_gpu.t(), 0.25, str_cat(dtype_name(dtype), " transposed"));
  }
}

TEST(FusedReluCuda, SpecialValues) {
  SKIP_WITHOUT_CUDA();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kDtypes) {
    Tensor x = from_vector<double>({nan, -0.0, 0.0, inf, -inf, 1e-30, 0.1, 0.5}, {2, 4}).to(dtype);
    for (double threshold : {0.0, 0.1, 1e300, inf}) {
      expect_parity(x, x.to(kCuda), threshold, str_cat(dtype_name(dtype), " special t=", threshold));
    }
  }
}

TEST(FusedReluCuda, GradientParity) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor x = tie_input({12, 40}, 0.5, dtype, 7);
    Tensor seed = tie_input({12, 40}, 0.0, dtype, 8);
    Variable xc(x, true, "x"), xg(x.to(kCuda), true, "x");
    Variable yc = relu_to_csr(xc, 0.5), yg = relu_to_csr(xg, 0.5);
    ASSERT_EQ(yg.grad_fn()->name(), "ReluToCsrBackward");
    sum(mul(to_dense(yc), Variable(seed))).backward();
    sum(mul(to_dense(yg), Variable(seed.to(kCuda)))).backward();
    ASSERT_TRUE(xg.grad().defined());
    EXPECT_EQ(xg.grad().device(), kCuda);
    EXPECT_EQ(doubles(xg.grad()), doubles(xc.grad()));
    EXPECT_EQ(doubles(xc.grad()), doubles(where(gt(x, 0.5), seed, zeros_like(seed))));
  }
}

TEST(FusedReluCuda, SparsifiedReluMatchesGenericPath) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : kDtypes) {
    for (double threshold : {0.0, 0.3}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " t=", threshold));
      SparsifierPtr inline_s = threshold > 0.0 ? std::make_shared<ThresholdSparsifier>(threshold) : nullptr;
      ValueSparsity out{inline_s, {"csr", {}}, nullptr, {"csr", {}}};
      SparsifiedOp fused = sparsified_relu(out);
      SparsifiedOp generic([](const std::vector<Variable>& in) { return relu(in[0]); }, out);
      Tensor x = tie_input({16, 72}, threshold, dtype, 11).to(kCuda);
      Tensor seed = tie_input({16, 72}, 0.0, dtype, 12).to(kCuda);
      Variable xf(x, true, "x"), xg(x, true, "x");
      Dispatcher::instance().reset_fallback_counts();
      Variable yf = fused.call({xf});
      ASSERT_NE(yf.grad_fn(), nullptr);
      EXPECT_EQ(yf.grad_fn()->name(), "ReluToCsrBackward");
      EXPECT_EQ(yf.value().device(), kCuda);
      EXPECT_EQ(std::string(yf.value().format()), "csr");
      sum(mul(to_dense(yf), Variable(seed))).backward();
      EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty()) << "the fused path fell back to dense";
      Variable yg = generic.call({xg});
      EXPECT_NE(yg.grad_fn()->name(), "ReluToCsrBackward");
      sum(mul(to_dense(yg), Variable(seed))).backward();
      EXPECT_EQ(nnz(yf.value()), nnz(yg.value()));
      EXPECT_EQ(doubles(to_dense(yf.value())), doubles(to_dense(yg.value())));
      EXPECT_EQ(doubles(xf.grad()), doubles(xg.grad()));
    }
  }
}

TEST(FusedReluCuda, RefusesBadInputs) {
  SKIP_WITHOUT_CUDA();
  Tensor x = tie_input({4, 6}, 0.5, DType::kF32, 3).to(kCuda);
  EXPECT_ERROR_NAMING(relu_to_csr(Variable(x), -0.5), "relu_to_csr: the threshold must be >= 0");
  EXPECT_ERROR_NAMING(relu_to_csr(Variable(x.reshape({2, 2, 6}))), "relu_to_csr: needs a dense 2-D");
  EXPECT_ERROR_NAMING(relu_to_csr(Variable(to_format(x, "csr"))), "format 'csr'");
  EXPECT_ERROR_NAMING(relu_to_csr(Variable(x.to(DType::kI32))), "relu_to_csr: needs a dense 2-D");
  // The fused forward declines what relu_to_csr refuses: sparsified_relu takes the generic path.
  ValueSparsity out{std::make_shared<ThresholdSparsifier>(0.5), {"dense", {}}, nullptr, {"dense", {}}};
  Variable y3 = sparsified_relu(out).call({Variable(x.reshape({2, 2, 6}), true)});
  EXPECT_EQ(y3.shape(), (Shape{2, 2, 6}));
  EXPECT_NE(y3.grad_fn()->name(), "ReluToCsrBackward");
}

}  // namespace
}  // namespace coppice
