// A counter-based random stream: (seed, offset). Each draw uses the stream at
// the current offset and then advances it by one, so results do not
// depend on the device or on how the work is split across threads.
#pragma once

#include <cstdint>

namespace coppice {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}

  // A stream keyed by (seed, purpose, step, rank), for masks and dropout that
  // must agree across devices and replicas (docs/architecture.md, Deterministic).
  static Generator keyed(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank);

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }

  // Returns the offset for the next draw and moves past it. The offset is a
  // separate word of the Philox counter from the element index, so one draw
  // of any size never overlaps the next.
  uint64_t advance() {
    ++draws_on_this_thread_;
    return offset_++;
  }

  // How many draws any generator has made on the calling thread: graph
  // capture (backend.h) compares it before and after, since a replayed draw
  // would repeat its numbers.
  static uint64_t draws_on_this_thread() { return draws_on_this_thread_; }

 private:
  uint64_t seed_;
  uint64_t offset_;
  static thread_local uint64_t draws_on_this_thread_;
};

// The default stream of the calling thread (seeded with 0 until manual_seed
// is called on that thread): each thread, like each rank of the in-process
// backend, has its own.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace coppice
