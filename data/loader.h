// DataLoader: batches of a Dataset, shuffled per epoch by seed, sharded by
// rank, on a chosen device.
//
// Each epoch's order is the identity, or with shuffle the permutation
// keyed_permutation(n, seed, kShufflePurpose, epoch): the same on every
// machine and every rank. Sharding follows PyTorch's DistributedSampler: the
// order is first made a multiple of world_size, by padding (repeating its own
// first entries, cyclically if needed; the default) or by dropping its last
// n % world_size entries; rank r then takes entries r, r + world_size, ...
// So every rank gets the same number of examples, the shards are disjoint
// except for the padded repeats, and their union is the whole epoch (with
// kPad) or all but n % world_size examples (with kDrop). Batches are
// consecutive runs of a rank's shard; with drop_last a final short batch is
// left out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "tensor/device.h"

namespace coppice {

enum class ShardRemainder { kPad, kDrop };

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;  // leave out a final batch shorter than batch_size
  int64_t rank = 0;
  int64_t world_size = 1;
  ShardRemainder remainder = ShardRemainder::kPad;
  Device device = Device::cpu();  // where batches are put
};

class DataLoader {
 public:
  // Throws coppice::Error for a null dataset, batch_size < 1, world_size < 1,
  // or rank outside [0, world_size).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // The number of examples this rank sees per epoch.
  int64_t shard_size() const;
  // The number of batches this rank yields per epoch.
  int64_t num_batches() const;

  // The whole epoch's order before sharding (a permutation of 0..n-1).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // This rank's dataset indices for `epoch`, in the order they are batched.
  std::vector<int64_t> shard_indices(int64_t epoch) const;
  // Batch `index` of `epoch`, on options().device; throws coppice::Error
  // for an index outside [0, num_batches()) (here and in Iterator).
  // Computes the epoch's order on every call; epoch() computes it once.
  Batch batch(int64_t epoch, int64_t index) const;

  // Range-for over one epoch: for (const Batch& b : loader.epoch(e)) ...
  class Iterator {
   public:
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> shard, int64_t index);
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }
    bool operator!=(const Iterator& other) const { return index_ != other.index_; }

   private:
    void load();
    const DataLoader* loader_;
    std::shared_ptr<const std::vector<int64_t>> shard_;
    int64_t index_;
    Batch current_;
  };
  class Epoch {
   public:
    Epoch(const DataLoader* loader, int64_t epoch) : loader_(loader), epoch_(epoch) {}
    Iterator begin() const;
    Iterator end() const;

   private:
    const DataLoader* loader_;
    int64_t epoch_;
  };
  Epoch epoch(int64_t epoch) const { return Epoch(this, epoch); }

 private:
  Batch make_batch(const std::vector<int64_t>& shard, int64_t index) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
};

}  // namespace coppice
