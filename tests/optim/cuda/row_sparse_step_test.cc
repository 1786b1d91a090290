// The row-sparse path on the GPU against the CPU: embedding's and
// embedding_bag's sparse gradients (sparse/row_sparse.h, composed of
// embedding_backward, index_select and the embedding_bag kernel) and
// Optimizer::step_rows (gather, the fused step, scatter_add/where write-back)
// for SGD with momentum (bit for bit) and Adam (to an ulp or two).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "sparse/row_sparse.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"

namespace coppice {
namespace {

#define REQUIRE_GPU()                                                                                        \
  do {                                                                                                       \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the row-sparse path on the GPU cannot run here"; \
  } while (0)

// Three steps of `make`'s optimizer on a [50, 8] table through embedding_bag
// with sparse_grad, on `device`; returns the table and the optimizer's state.
std::vector<Tensor> run(const Device& device, bool adam) {
  Generator gen(5);
  Variable w(randn({50, 8}, TensorOptions(DType::kF32), gen).to(device), true);
  std::unique_ptr<Optimizer> opt;
  if (adam) {
    AdamOptions o;
    o.weight_decay = 0.01;
    opt = std::make_unique<Adam>(std::vector<Variable>{w}, o);
  } else {
    SgdOptions o{0.1};
    o.momentum = 0.9;
    opt = std::make_unique<Sgd>(std::vector<Variable>{w}, o);
  }
  const std::vector<std::vector<int64_t>> batches = {{3, 7, 7, 0, 49}, {7, 11, 3}, {20, 20, 20, 1, 0}};
  for (const std::vector<int64_t>& b : batches) {
    EmbeddingBagOptions o;
    o.offsets = from_vector<int64_t>({0, 2}, {2}).to(device);
    o.padding_idx = 0;
    o.sparse_grad = true;
    w.set_grad(Tensor());
    Tensor g = randn({2, 8}, TensorOptions(DType::kF32), gen).to(device);
    sum(embedding_bag(w, from_vector(b, {static_cast<int64_t>(b.size())}).to(device), o) * Variable(g)).backward();
    EXPECT_TRUE(is_row_sparse(w.grad()));
    opt->step();
  }
  std::vector<Tensor> out = {w.value().to(Device::cpu())};
  for (const auto& [key, t] : opt->state(w)->tensors) out.push_back(t.to(Device::cpu()));
  return out;
}

TEST(CudaRowSparseStep, MatchesTheCpu) {
  REQUIRE_GPU();
  for (bool adam : {false, true}) {
    const std::vector<Tensor> cpu = run(Device::cpu(), adam), gpu = run(Device::cuda(0), adam);
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      // SGD bit for bit; Adam within an ulp or two (its fused kernels' sqrt and division).
      EXPECT_TRUE(adam ? allclose(gpu[i], cpu[i], 1e-6, 1e-7) : allclose(gpu[i], cpu[i], 0, 0))
          << (adam ? "adam" : "sgd") << " tensor " << i << " differs by " << max_abs_diff(gpu[i], cpu[i]);
    }
  }
}

}  // namespace
}  // namespace coppice
