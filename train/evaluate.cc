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

int64_t count_correct(const Variable& logits2d, const Tensor& targets) {
  const std::vector<int64_t> pred = argmax(logits2d, 1).to_vector<int64_t>();
  const std::vector<int64_t> tgt = targets.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size() && i < tgt.size(); ++i) correct += pred[i] == tgt[i] ? 1 : 0;
  return correct;
}

int64_t count_scored(const Tensor& targets) {
  const int64_t ignored = CrossEntropyOptions{}.ignore_index;
  const std::vector<int64_t> tgt = targets.to_vector<int64_t>();
  return static_cast<int64_t>(tgt.size()) - std::count(tgt.begin(), tgt.end(), ignored);
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
    const int64_t n = count_scored(t1);
    loss_sum += cross_entropy(l2, t1).item() * static_cast<double>(n);
    correct += count_correct(l2, t1);
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
