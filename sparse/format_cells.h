// A kernel per format for an internal entry point that takes operands of
// several formats (a planner route's launcher, a helper the elementwise
// kernels share): each format's kernel is a cell under the format's name, and
// the entry looks up its operand's format, as the dispatcher does for ops
// (tensor/dispatcher.h). So no kernel chooses its behaviour by comparing
// layouts (tests/sparse/kernel_cells_test.sh holds the kernel folders to
// that), and a new format adds a cell rather than a case.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

template <typename Fn>
class FormatCells {
 public:
  // Cells as (format name, kernel); name built-ins with format_name(Layout).
  FormatCells(std::initializer_list<std::pair<std::string, Fn>> cells) : cells_(cells) {}

  // The cell of t's format, or nullptr when it has none.
  const Fn* find(const Tensor& t) const {
    for (const auto& cell : cells_) {
      if (cell.first == t.format()) return &cell.second;
    }
    return nullptr;
  }

 private:
  std::vector<std::pair<std::string, Fn>> cells_;
};

}  // namespace coppice
