#include "tensor/generator.h"

#include "tensor/philox.h"

namespace coppice {

Generator Generator::keyed(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank) {
  // Hash the key through Philox itself so nearby keys give unrelated streams.
  philox::U32x4 v = philox::philox4x32_10({static_cast<uint32_t>(purpose), static_cast<uint32_t>(step),
                                           static_cast<uint32_t>(step >> 32), static_cast<uint32_t>(rank)},
                                          static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return Generator((static_cast<uint64_t>(v.x) << 32) | v.y, 0);
}

thread_local uint64_t Generator::draws_on_this_thread_ = 0;

Generator& default_generator() {
  // One per thread: the ranks of the in-process backend are threads, and
  // each seeds and draws from its own stream as a process per rank would.
  thread_local Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace coppice
