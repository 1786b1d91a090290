#include "data/dataset.h"

#include <algorithm>
#include <utility>

#include "data/permutation.h"
#include "sparse/entry_remap.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {

Batch Batch::to(Device device) const {
  return Batch{to_device(inputs, device), targets.to(device), indices};  // inputs may be sparse
}

void Dataset::check_indices(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (size_t i = 0; i < indices.size(); ++i) {
    COPPICE_CHECK(indices[i] >= 0 && indices[i] < n, name(), ".get_batch: index ", indices[i], " (position ", i,
                  ") is out of range [0, ", n, ")");
  }
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets, std::string label)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), label_(std::move(label)) {
  COPPICE_CHECK(inputs_.defined(), "TensorDataset: inputs are undefined");
  if (inputs_.is_dense()) check_dense(inputs_, "TensorDataset", "inputs");
  COPPICE_CHECK(inputs_.is_dense() || inputs_.dim() == 2,
                "TensorDataset: sparse inputs must be a matrix "
                "[examples, features], got ",
                inputs_.format(), " of shape ", shape_to_string(inputs_.shape()));
  check_dense(targets_, "TensorDataset", "targets");
  COPPICE_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1, "TensorDataset: inputs ", shape_to_string(inputs_.shape()),
                " and targets ", shape_to_string(targets_.shape()), " must be at least 1-D (examples along dim 0)");
  COPPICE_CHECK(inputs_.size(0) == targets_.size(0), "TensorDataset: inputs ", shape_to_string(inputs_.shape()),
                " and targets ", shape_to_string(targets_.shape()), " disagree in the number of examples (dim 0)");
  check_same_device({inputs_, targets_}, "TensorDataset");
  size_ = inputs_.size(0);
}

std::string TensorDataset::name() const { return str_cat(label_, " of ", size_); }

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  check_indices(indices);
  Tensor index =
      from_vector(indices, {static_cast<int64_t>(indices.size())}, TensorOptions(DType::kI64, inputs_.device()));
  Tensor inputs;
  if (inputs_.is_dense()) {
    inputs = index_select(inputs_, 0, index);
  } else {
    const RemappedPattern rows = select_rows(inputs_, indices, name());
    inputs = with_values(rows.pattern, index_select(values(inputs_).reshape({-1}), 0, rows.take));
  }
  return Batch{inputs, index_select(targets_, 0, index), indices};
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  COPPICE_CHECK(base_ != nullptr, "SubsetDataset: the base dataset is null");
  const int64_t n = base_->size();
  for (size_t i = 0; i < indices_.size(); ++i) {
    COPPICE_CHECK(indices_[i] >= 0 && indices_[i] < n, "SubsetDataset of ", base_->name(), ": index ", indices_[i],
                  " (position ", i, ") is out of range [0, ", n, ")");
  }
}

std::string SubsetDataset::name() const { return str_cat("subset of ", size(), " of ", base_->name()); }

Batch SubsetDataset::get_batch(const std::vector<int64_t>& indices) const {
  check_indices(indices);
  std::vector<int64_t> mapped(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) mapped[i] = indices_[static_cast<size_t>(indices[i])];
  Batch b = base_->get_batch(mapped);
  b.indices = indices;
  return b;
}

namespace {

void check_split(const std::shared_ptr<const Dataset>& dataset, int64_t validation_size, const char* op) {
  COPPICE_CHECK(dataset != nullptr, op, ": the dataset is null");
  COPPICE_CHECK(validation_size >= 0 && validation_size <= dataset->size(), op, ": validation_size ", validation_size,
                " is outside [0, ", dataset->size(), "] for ", dataset->name());
}

}  // namespace

TrainValidation split_last(std::shared_ptr<const Dataset> dataset, int64_t validation_size) {
  check_split(dataset, validation_size, "split_last");
  const int64_t n = dataset->size();
  std::vector<int64_t> train(static_cast<size_t>(n - validation_size));
  std::vector<int64_t> val(static_cast<size_t>(validation_size));
  for (int64_t i = 0; i < n; ++i) {
    if (i < n - validation_size) {
      train[static_cast<size_t>(i)] = i;
    } else {
      val[static_cast<size_t>(i - (n - validation_size))] = i;
    }
  }
  return {std::make_shared<SubsetDataset>(dataset, std::move(train)),
          std::make_shared<SubsetDataset>(dataset, std::move(val))};
}

TrainValidation split_random(std::shared_ptr<const Dataset> dataset, int64_t validation_size, uint64_t seed) {
  check_split(dataset, validation_size, "split_random");
  std::vector<int64_t> perm = keyed_permutation(dataset->size(), seed, kSplitPurpose, 0);
  std::vector<int64_t> val(perm.begin(), perm.begin() + validation_size);
  std::vector<int64_t> train(perm.begin() + validation_size, perm.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {std::make_shared<SubsetDataset>(dataset, std::move(train)),
          std::make_shared<SubsetDataset>(dataset, std::move(val))};
}

}  // namespace coppice
