// Two-pass construction of a compressed result in parallel (internal to
// sparse/cpu): count every output row, turn the counts into pointers, fill.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/cpu/parallel.h"
#include "tensor/error.h"

namespace coppice::sparse_cpu {

class RowPasses {
 public:
  explicit RowPasses(int64_t rows) : rows_(rows), counts_(static_cast<size_t>(rows), 0) {}

  // fn(r0, r1, counts) sets counts[r] for every r in [r0, r1).
  template <typename Fn>
  void count(const Fn& fn) {
    cpu::parallel_for(0, rows_, kGrain, [&](int64_t r0, int64_t r1) { fn(r0, r1, counts_); });
  }

  // Writes the i32 pointers (rows + 1) and returns the total; throws naming
  // `op` when it exceeds the i32 index range.
  int64_t offsets(std::vector<int32_t>* pointers, std::string_view op) const {
    pointers->assign(static_cast<size_t>(rows_ + 1), 0);
    int64_t total = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      total += counts_[static_cast<size_t>(r)];
      COPPICE_CHECK(total < (int64_t{1} << 31), op, ": the result has more than 2^31 - 1 stored entries");
      (*pointers)[static_cast<size_t>(r + 1)] = static_cast<int32_t>(total);
    }
    return total;
  }

  // fn(r0, r1) fills rows [r0, r1) at their pointers.
  template <typename Fn>
  void fill(const Fn& fn) {
    cpu::parallel_for(0, rows_, kGrain, fn);
  }

 private:
  static constexpr int64_t kGrain = 64;
  int64_t rows_;
  std::vector<int64_t> counts_;
};

}  // namespace coppice::sparse_cpu
