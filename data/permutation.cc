#include "data/permutation.h"

#include <numeric>
#include <utility>

#include "tensor/error.h"
#include "tensor/philox.h"

namespace coppice {

std::vector<int64_t> random_permutation(int64_t n, Generator& gen) {
  COPPICE_CHECK(n >= 0, "random_permutation: n must be >= 0, got ", n);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  const uint64_t seed = gen.seed();
  const uint64_t offset = gen.advance();
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t u = static_cast<uint64_t>(i);
    const philox::U32x4 b = philox::block(seed, offset, u);
    const uint64_t w = uint64_t{b.x} << 32 | b.y;
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(w) * (u + 1)) >> 64);
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

std::vector<int64_t> keyed_permutation(int64_t n, uint64_t seed, uint64_t purpose, uint64_t epoch) {
  Generator gen = Generator::keyed(seed, purpose, epoch, 0);
  return random_permutation(n, gen);
}

}  // namespace coppice
