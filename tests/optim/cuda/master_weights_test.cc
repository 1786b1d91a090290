// bf16/f16 parameters with f32 master weights on CUDA against the same on
// the CPU (dense and CSR, Adam through the fused kernel on the master, SGD
// with momentum through tensor ops), and the loss scaler's inf/NaN check on
// CUDA gradients. Every test skips, saying why, when no GPU is present.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "optim/adam.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tests/optim/test_util.h"

namespace coppice {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the master-weight path on CUDA cannot run here"

using optim_test::random_pattern;
using optim_test::random_tensor;

const Device kCuda = Device::cuda(0);

std::unique_ptr<Optimizer> make(bool adam, const Variable& w) {
  if (adam) return std::make_unique<Adam>(std::vector<Variable>{w}, AdamOptions{1e-3});
  SgdOptions o;
  o.lr = 1e-3;
  o.momentum = 0.9;
  return std::make_unique<Sgd>(std::vector<Variable>{w}, o);
}

TEST(MasterWeightsCuda, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool sparse : {false, true}) {
      for (bool adam : {false, true}) {
        Tensor start = random_tensor({64, 48}, 1);
        if (sparse) start = sparse_from_mask(start, random_pattern({64, 48}, 0.2, 2), "csr");
        start = sparse ? with_values(start, values(start).to(dtype)) : start.to(dtype);
        Variable cpu(start, true, "w");
        Variable gpu(to_device(start, kCuda), true, "w");
        auto oc = make(adam, cpu);
        auto og = make(adam, gpu);
        for (int step = 0; step < 5; ++step) {
          const Tensor gv = random_tensor(values(start).shape(), 10 + step, dtype);
          cpu.set_grad(sparse ? with_values(cpu.value(), gv) : gv);
          gpu.set_grad(sparse ? with_values(gpu.value(), gv.to(kCuda)) : gv.to(kCuda));
          oc->step(4.0);
          og->step(4.0);
        }
        const Tensor mc = oc->state(cpu)->tensors.at(kMasterWeightsState);
        const Tensor mg = og->state(gpu)->tensors.at(kMasterWeightsState);
        EXPECT_EQ(mg.device(), kCuda);
        EXPECT_EQ(mg.dtype(), DType::kF32);
        EXPECT_LE(max_abs_diff(mg.to(Device::cpu()), mc), 1e-5)
            << dtype_name(dtype) << (sparse ? " csr" : " dense") << (adam ? " adam" : " sgd");
        EXPECT_LE(
            max_abs_diff(values(gpu.value()).to(Device::cpu()).to(DType::kF32), values(cpu.value()).to(DType::kF32)),
            1e-2);
      }
    }
  }
}

TEST(MasterWeightsCuda, LossScalerSeesInfOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  Variable w(full({1000}, 1.0, TensorOptions(DType::kF16, kCuda)), true, "w");
  Sgd opt({w}, SgdOptions{0.1});
  LossScaler scaler = LossScaler::dynamic();
  std::vector<double> g(1000, 1.0);
  g[777] = std::numeric_limits<double>::infinity();
  w.set_grad(from_vector(g).to(DType::kF16).to(kCuda));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.scale(), 32768.0);
  w.set_grad(full({1000}, 1.0, TensorOptions(DType::kF16, kCuda)));
  EXPECT_TRUE(scaler.step(opt));
}

}  // namespace
}  // namespace coppice
