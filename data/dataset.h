// The Dataset interface, the in-memory TensorDataset, subsets and the
// validation splits.
//
// A dataset is a fixed number of examples, each an (input, target) pair; a
// batch is the examples at some indices stacked along a new first dimension.
// Datasets are immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct Batch {
  Tensor inputs;   // [B, ...]
  Tensor targets;  // [B, ...]
  // The dataset indices the rows came from, in row order.
  std::vector<int64_t> indices;

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
  // Both tensors moved to `device` (themselves when already there).
  Batch to(Device device) const;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // The examples at `indices` (each in [0, size()), repeats allowed), stacked
  // in that order, on the CPU. Throws coppice::Error naming the dataset for an
  // index out of range.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  // A short description for messages ("TensorDataset of 60000", ...).
  virtual std::string name() const = 0;

 protected:
  // Throws unless every index is in [0, size()).
  void check_indices(const std::vector<int64_t>& indices) const;
};

// Examples held as two tensors whose first dimensions agree: example i is
// (inputs[i], targets[i]). Batches are gathered with index_select on the
// tensors' device. The inputs may be a sparse matrix [examples, features]
// of any format (a bag of words, a document's tf-idf): a batch's inputs are
// then its rows as a CSR [batch, features], the stored entries gathered
// (sparse/entry_remap.h's select_rows), never a dense row.
class TensorDataset final : public Dataset {
 public:
  // Throws unless both are defined, the targets dense, both at least 1-D (a
  // sparse input exactly 2-D), and they agree in size(0).
  TensorDataset(Tensor inputs, Tensor targets, std::string label = "TensorDataset");

  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  std::string name() const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
  std::string label_;
  int64_t size_;
};

// The examples of `base` at `indices` (a view: nothing is copied).
class SubsetDataset final : public Dataset {
 public:
  // Throws unless every index is in [0, base->size()).
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;  // Batch::indices are this subset's
  std::string name() const override;

  const std::shared_ptr<const Dataset>& base() const { return base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

struct TrainValidation {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> validation;
};

// The last `validation_size` examples (in order) for validation, the rest for
// training. Throws unless 0 <= validation_size <= dataset->size().
TrainValidation split_last(std::shared_ptr<const Dataset> dataset, int64_t validation_size);

// A seeded random split: a permutation of all examples (Philox, keyed by
// `seed` and kSplitPurpose, so the same on every machine) whose first
// `validation_size` entries, sorted, are the validation examples; the others,
// sorted, train. Throws unless 0 <= validation_size <= dataset->size().
TrainValidation split_random(std::shared_ptr<const Dataset> dataset, int64_t validation_size, uint64_t seed);

}  // namespace coppice
