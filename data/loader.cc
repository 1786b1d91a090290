#include "data/loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "data/permutation.h"
#include "tensor/checked_math.h"
#include "tensor/error.h"

namespace coppice {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  COPPICE_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  COPPICE_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  COPPICE_CHECK(options_.world_size >= 1, "DataLoader: world_size must be >= 1, got ", options_.world_size);
  COPPICE_CHECK(options_.rank >= 0 && options_.rank < options_.world_size, "DataLoader: rank ", options_.rank,
                " is outside [0, world_size = ", options_.world_size, ")");
}

int64_t DataLoader::shard_size() const {
  const int64_t n = dataset_->size();
  const int64_t w = options_.world_size;
  return options_.remainder == ShardRemainder::kPad ? ceil_div(n, w) : n / w;
}

int64_t DataLoader::num_batches() const {
  const int64_t s = shard_size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? s / b : ceil_div(s, b);
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  COPPICE_CHECK(epoch >= 0, "DataLoader: epoch must be >= 0, got ", epoch);
  const int64_t n = dataset_->size();
  if (options_.shuffle) return keyed_permutation(n, options_.seed, kShufflePurpose, static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

std::vector<int64_t> DataLoader::shard_indices(int64_t epoch) const {
  std::vector<int64_t> order = epoch_order(epoch);
  const int64_t w = options_.world_size;
  const int64_t total = shard_size() * w;
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(shard_size()));
  for (int64_t i = options_.rank; i < total; i += w) shard.push_back(order[static_cast<size_t>(i % n)]);
  return shard;
}

Batch DataLoader::make_batch(const std::vector<int64_t>& shard, int64_t index) const {
  // index comes from outside too (a checkpoint's batch): never read before or past the shard.
  const int64_t batches = num_batches();
  COPPICE_CHECK(index >= 0 && index < batches, "DataLoader: batch index ", index, " is outside [0, ", batches, ")");
  const int64_t begin = checked_mul(index, options_.batch_size, "DataLoader: batch index * batch_size");
  COPPICE_CHECK(begin < static_cast<int64_t>(shard.size()), "DataLoader: batch ", index, " starts at ", begin,
                ", past the shard of ", shard.size(), " examples");
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(shard.size()));
  std::vector<int64_t> idx(shard.begin() + begin, shard.begin() + end);
  return dataset_->get_batch(idx).to(options_.device);
}

Batch DataLoader::batch(int64_t epoch, int64_t index) const { return make_batch(shard_indices(epoch), index); }

DataLoader::Iterator::Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> shard,
                               int64_t index)
    : loader_(loader), shard_(std::move(shard)), index_(index) {
  load();
}

void DataLoader::Iterator::load() {
  if (shard_ != nullptr && index_ < loader_->num_batches()) {
    current_ = loader_->make_batch(*shard_, index_);
  } else {
    current_ = Batch();
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

DataLoader::Iterator DataLoader::Epoch::begin() const {
  return Iterator(loader_, std::make_shared<const std::vector<int64_t>>(loader_->shard_indices(epoch_)), 0);
}

DataLoader::Iterator DataLoader::Epoch::end() const { return Iterator(loader_, nullptr, loader_->num_batches()); }

}  // namespace coppice
