#include "train/evaluate.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "autograd/functions/nn.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/no_grad.h"
#include "distributed/replica_sync.h"
#include "tensor/ops.h"
#include "train/mixed_precision.h"

namespace coppice {

std::pair<Variable, Tensor> flatten_for_loss(const Variable& logits, const Tensor& targets) {
  if (logits.dim() <= 2) return {logits, targets};
  const int64_t c = logits.size(logits.dim() - 1);
  return {reshape(logits, {-1, c}), targets.reshape({-1})};
}

Tensor correct_and_scored(const Tensor& logits2d, const Tensor& targets) {
  const Tensor t = targets.to(DType::kI64).reshape({-1});
  const Tensor correct = sum(eq(argmax(logits2d, 1), t).to(DType::kF64));
  const Tensor scored = sum(ne(t, static_cast<double>(CrossEntropyOptions{}.ignore_index)).to(DType::kF64));
  return stack({correct, scored});
}

EvalResult evaluate(Module& model, const DataLoader& loader, int64_t max_batches, Communicator* comm) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t batches = max_batches > 0 ? std::min(max_batches, loader.num_batches()) : loader.num_batches();
  const int64_t first = comm != nullptr ? comm->rank() : 0;
  const int64_t stride = comm != nullptr ? comm->world_size() : 1;
  auto order = std::make_shared<const std::vector<int64_t>>(loader.shard_indices(0));
  const DType dtype = model_dtype(model);
  for (int64_t i = first; i < batches; i += stride) {
    const Batch b = *DataLoader::Iterator(&loader, order, i);
    const Variable logits = logits_for_loss(model(Variable(cast_inputs(b.inputs, dtype))));
    auto [l2, t1] = flatten_for_loss(logits, b.targets);
    // The loss and both counts in one read: [loss, correct, scored].
    const std::vector<double> read =
        cat({cross_entropy(l2, t1).value().reshape({1}).to(DType::kF64), correct_and_scored(l2.value(), t1)})
            .to(Device::cpu())
            .to_vector<double>();
    const auto n = static_cast<int64_t>(read[2]);
    loss_sum += read[0] * static_cast<double>(n);
    correct += static_cast<int64_t>(read[1]);
    r.examples += n;
  }
  model.train(was_training);
  if (comm != nullptr) {
    const std::vector<double> sums =
        all_reduce_scalars(*comm, {loss_sum, static_cast<double>(correct), static_cast<double>(r.examples)});
    loss_sum = sums[0];
    correct = static_cast<int64_t>(sums[1]);
    r.examples = static_cast<int64_t>(sums[2]);
  }
  if (r.examples > 0) {
    r.loss = loss_sum / static_cast<double>(r.examples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.examples);
  }
  return r;
}

}  // namespace coppice
