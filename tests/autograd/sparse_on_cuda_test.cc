// einsum, rearrange, one_hot and the sparse frontends (autograd/functions/
// einsum.h, rearrange.h, sparse_nn.h) on a GPU against the same calls on the
// CPU: values and every gradient, f32, CSR, COO and BSR operands. Skips
// without a GPU; tools/device/build_devbin.sh carries it to the lent one.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "autograd/functions/sparse_nn.h"
#include "sparse/convert.h"
#include "sparse/one_hot.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"

namespace coppice {
namespace {

Tensor random_sparse(const std::string& format, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  const FormatOptions o = format == "bsr" ? FormatOptions::block(4) : FormatOptions{};
  return sparse_from_mask(randn(shape, DType::kF32, gen), lt(rand(shape, DType::kF32, gen), 0.4), format, o);
}

Tensor on_cpu(const Tensor& t) { return to_dense(t).to(Device::cpu()); }

// f(inputs) on the CPU and on the GPU: the outputs and the gradients of
// sum(out * g) for every input equal within f32 tolerance.
void expect_same_on_gpu(const std::function<Variable(const std::vector<Variable>&)>& f,
                        const std::vector<Tensor>& inputs) {
  std::vector<Tensor> results[2];
  for (int gpu = 0; gpu < 2; ++gpu) {
    std::vector<Variable> vs;
    for (const Tensor& t : inputs) vs.emplace_back(gpu ? to_device(t, Device::cuda()) : t, true);
    Variable y = f(vs);
    Generator gen(99);
    const Tensor g = randn(y.shape(), DType::kF32, gen).to(y.value().device());
    sum(mul(to_dense(y), Variable(g))).backward();
    results[gpu].push_back(on_cpu(y.value()));
    for (const Variable& v : vs) results[gpu].push_back(on_cpu(v.grad()));
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_TRUE(allclose(results[1][i], results[0][i], 1e-4, 1e-4))
        << "result " << i << ": " << max_abs_diff(results[1][i], results[0][i]);
  }
}

class SparseOnCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  }
};

TEST_F(SparseOnCuda, EinsumRoutes) {
  for (const std::string format : {"csr", "coo", "bsr"}) {
    SCOPED_TRACE(format);
    const Tensor s = random_sparse(format, {16, 32}, 1);
    Generator gen(2);
    const Tensor x = randn({8, 32}, DType::kF32, gen), batch = randn({16, 32, 4}, DType::kF32, gen);
    expect_same_on_gpu([](const std::vector<Variable>& v) { return einsum("bj,ij->bi", v); }, {x, s});
    expect_same_on_gpu([](const std::vector<Variable>& v) { return einsum("ij,ijk->ik", v); }, {s, batch});
    expect_same_on_gpu([](const std::vector<Variable>& v) { return einsum("ij->ji", v); }, {s});
  }
  const Tensor a = random_sparse("csr", {16, 32}, 3), b = random_sparse("csr", {32, 8}, 4);
  expect_same_on_gpu([](const std::vector<Variable>& v) { return einsum("ij,jk->ik", v); }, {a, b});
}

TEST_F(SparseOnCuda, FrontendsAndRearrange) {
  for (const std::string format : {"csr", "coo", "bsr"}) {
    SCOPED_TRACE(format);
    const Tensor s = random_sparse(format, {16, 32}, 5), t = random_sparse(format, {16, 32}, 6);
    Generator gen(7);
    const Tensor w = randn({32}, DType::kF32, gen), bias = randn({32}, DType::kF32, gen);
    expect_same_on_gpu([](const std::vector<Variable>& v) { return softmax(v[0], 1); }, {s});
    expect_same_on_gpu([](const std::vector<Variable>& v) { return log_softmax(v[0], 0); }, {s});
    expect_same_on_gpu([](const std::vector<Variable>& v) { return layer_norm(v[0], {32}, v[1], v[2]); }, {s, w, bias});
    expect_same_on_gpu([](const std::vector<Variable>& v) { return cat(v, 1); }, {s, t});
    const Tensor cond = gt(randn({16, 32}, DType::kF32, gen), 0.0);
    expect_same_on_gpu(
        [cond](const std::vector<Variable>& v) { return where(cond.to(v[0].value().device()), v[0], v[1]); }, {s, t});
    const Tensor idx = from_vector<int64_t>({3, 0, 15, 3});
    expect_same_on_gpu([idx](const std::vector<Variable>& v) { return embedding(v[0], idx.to(v[0].value().device())); },
                       {s});
    expect_same_on_gpu(
        [](const std::vector<Variable>& v) {
          return rearrange(v[0], "i (j k) -> k i j", {{"k", 4}});
        },
        {s});
  }
  const Tensor gpu_gate = one_hot(from_vector<int64_t>({2, 0, 1}).to(Device::cuda()), 4);
  EXPECT_EQ(gpu_gate.device(), Device::cuda());
  EXPECT_TRUE(allclose(on_cpu(gpu_gate), to_dense(one_hot(from_vector<int64_t>({2, 0, 1}), 4)), 0, 0));
}

}  // namespace
}  // namespace coppice
