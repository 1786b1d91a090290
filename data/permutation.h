// Seeded permutations drawn from the counter-based Philox stream, so that a
// (seed, purpose, epoch) key gives the same order on every machine and rank
// (docs/architecture.md, Deterministic).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/generator.h"

namespace coppice {

// The Generator::keyed purposes the data layer draws under.
inline constexpr uint64_t kShufflePurpose = 0x646174612d736875;    // "data-shu"
inline constexpr uint64_t kSplitPurpose = 0x646174612d73706c;      // "data-spl"
inline constexpr uint64_t kSyntheticPurpose = 0x646174612d73796e;  // "data-syn"

// A uniformly random permutation of 0..n-1: Fisher-Yates (i from n-1 down to
// 1) where swap i takes w, the first two 32-bit words of Philox block i at the
// generator's next offset, as one 64-bit number and swaps i with
// floor(w * (i + 1) / 2^64), a bias below (i + 1) / 2^64.
// Consumes one offset of `gen`. Throws for n < 0.
std::vector<int64_t> random_permutation(int64_t n, Generator& gen);

// The permutation of epoch `epoch` under `seed`:
// random_permutation(n, Generator::keyed(seed, purpose, epoch, 0)).
std::vector<int64_t> keyed_permutation(int64_t n, uint64_t seed, uint64_t purpose, uint64_t epoch);

}  // namespace coppice
