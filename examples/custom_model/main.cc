// A model written against Coppice's C++ API, outside this repository's build:
// a two-layer network whose first weight is 90 % sparse in CSR, trained with
// SGD on points labelled by which of 4 random directions they point along.
// It prints the loss and exits 0 when the loss fell at least 3x.
#include <cstdio>
#include <memory>
#include <string>

#include "autograd/autograd.h"
#include "models/layers.h"
#include "models/module.h"
#include "optim/growth.h"
#include "optim/sgd.h"
#include "sparse/convert.h"
#include "tensor/ops.h"

using namespace coppice;

// Modules register their parameters and submodules by name; the names
// ("fc1.weight") are what checkpoints, sparsity rules and optimizers see.
class TwoLayer : public Module {
 public:
  TwoLayer(int64_t in, int64_t hidden, int64_t classes, Generator& gen) : Module("TwoLayer") {
    fc1_ = register_module("fc1", std::make_shared<Linear>(in, hidden, true, LayerOptions{}, gen));
    fc2_ = register_module("fc2", std::make_shared<Linear>(hidden, classes, true, LayerOptions{}, gen));
  }
  Variable forward(const Variable& x) override { return (*fc2_)(fc1_->forward_relu(x)); }

 private:
  std::shared_ptr<Linear> fc1_, fc2_;
};

int main() {
  Generator gen(7);
  constexpr int64_t kExamples = 1024, kIn = 64, kHidden = 256, kClasses = 4;
  const Tensor x = randn({kExamples, kIn}, TensorOptions(DType::kF32, Device::cpu()), gen);
  const Tensor directions = randn({kIn, kClasses}, TensorOptions(DType::kF32, Device::cpu()), gen);
  const Tensor y = argmax(matmul(x, directions), 1);

  TwoLayer model(kIn, kHidden, kClasses, gen);
  // fc1's weight keeps 10 % of its entries, chosen at random, stored as CSR:
  // its gradient and SGD's momentum stay that size too.
  const Variable& w = model.parameter("fc1.weight");
  const Tensor mask = random_mask(w.shape(), w.numel() / 10, /*seed=*/7, /*purpose=*/1);
  model.set_parameter("fc1.weight", Variable(sparse_from_mask(w.value(), mask, "csr"), true, "fc1.weight"));

  SgdOptions options;
  options.lr = 0.1;
  options.momentum = 0.9;
  Sgd sgd(model.parameters(), options);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    sgd.zero_grad();
    Variable loss = cross_entropy(model(Variable(x)), y);
    loss.backward();
    sgd.step();
    last = loss.item();
    if (step == 0) first = last;
    if (step % 50 == 0 || step == 199) std::printf("step %3d  loss %.4f\n", step + 1, last);
  }
  const Tensor& w1 = model.parameter("fc1.weight").value();
  std::printf("fc1.weight: %s, %lld of %lld stored; loss %.4f -> %.4f\n", std::string(w1.format()).c_str(),
              static_cast<long long>(nnz(w1)), static_cast<long long>(w1.numel()), first, last);
  return w1.format() == "csr" && last < first / 3 ? 0 : 1;
}
