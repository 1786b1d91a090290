// The sparse operands of the product parity harness: for each built-in
// format, the cases a cell runs on (shapes, block shapes, n:m) and their
// patterns, chosen from the format table's option kind so that every kind of
// format meets what its kernels find hard:
//   - shapes that are no multiple of a kernel's tile (CUDA: 64-wide BSR and
//     2:4 tiles; the dense side's size odd), beside block sizes the tiled
//     and tensor-core routes take (16, 32, 64; 32x16 rectangular);
//   - an empty row (an empty block row for the block formats, a row of
//     stored zeros for n:m, whose groups always hold n slots);
//   - n:m patterns valid for n:m: 2:4 transposable ones (every 4x4 tile keeps
//     two per row and two per column, so W^T is 2:4 too and the transposed
//     product can run on sparse tensor cores), 2:4 ones that are not, and a
//     sparser 1:16 (CUDA multiplies it through CSR rather than densely).
// Values are drawn on the host in +-[0.25, 2) (no cancellation to exact
// zero), so every device sees the same ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/formats.h"
#include "tensor/ops.h"

namespace coppice::parity {

struct SparseCase {
  std::string name;
  int64_t rows, cols;     // the sparse operand's shape
  FormatOptions options;  // its block shape or n:m
  int64_t free;           // the dense operand's other dimension (and sddmm's inner one)
  double density;         // of elements, or of blocks for block formats
  bool transposable;      // n:m: the transpose is n:m too (always true elsewhere)
};

inline std::vector<SparseCase> cases_of(FormatOptionKind kind) {
  switch (kind) {
    case FormatOptionKind::kBlock:
      return {{"2x3 blocks [6, 12]", 6, 12, FormatOptions::block(2, 3), 5, 0.5, true},
              {"16x16 blocks [48, 80]", 48, 80, FormatOptions::block(16), 37, 0.5, true},
              {"32x16 blocks [64, 96]", 64, 96, FormatOptions::block(32, 16), 37, 0.5, true},
              {"64x64 blocks [192, 128]", 192, 128, FormatOptions::block(64), 21, 0.6, true}};
    case FormatOptionKind::kSquareBlock:
      return {{"2x2 blocks [6, 12]", 6, 12, FormatOptions::block(2), 5, 0.5, true},
              {"16x16 blocks [48, 80]", 48, 80, FormatOptions::block(16), 37, 0.5, true}};
    case FormatOptionKind::kNm:
      return {{"2:4 [6, 12]", 6, 12, FormatOptions::nm(2, 4), 5, 0.5, false},
              {"2:4 transposable [64, 128]", 64, 128, FormatOptions::nm(2, 4), 40, 0.5, true},
              {"1:16 [5, 32]", 5, 32, FormatOptions::nm(1, 16), 7, 1.0 / 16, false}};
    case FormatOptionKind::kNone: break;
  }
  return {{"[7, 12]", 7, 12, {}, 5, 0.35, true}, {"[50, 70]", 50, 70, {}, 37, 0.1, true}};
}

// Dense values of `shape` in +-[0.25, 2), none zero.
inline Tensor full_values(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.25, 2.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = (rng() & 1) != 0 ? -mag(rng) : mag(rng);
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

// The kept positions of a [rows, cols] operand of the case (row-major, 0/1):
// blocks of the case's block shape kept with its density, block row 1 empty;
// for n:m, n of every m along each row (transposable: row r of a 4x4 tile
// keeps columns (r + shift) % 4 < 2, each tile's shift drawn); else elements
// kept with the density, row 1 empty.
inline std::vector<bool> pattern(const SparseCase& c, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<bool> keep(static_cast<size_t>(rows * cols), false);
  auto at = [&](int64_t r, int64_t k) { return keep[static_cast<size_t>(r * cols + k)]; };
  const FormatOptions& o = c.options;
  if (o.m > 0 && c.transposable) {
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      for (int64_t k0 = 0; k0 < cols; k0 += 4) {
        const int64_t shift = static_cast<int64_t>(rng() % 4);
        for (int64_t r = r0; r < r0 + 4; ++r) {
          for (int64_t k = k0; k < k0 + 4; ++k) at(r, k) = (r - r0 + k - k0 + shift) % 4 < 2;
        }
      }
    }
  } else if (o.m > 0) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < cols; g += o.m) {
        std::vector<int64_t> slots(static_cast<size_t>(o.m));
        for (int64_t i = 0; i < o.m; ++i) slots[static_cast<size_t>(i)] = g + i;
        std::shuffle(slots.begin(), slots.end(), rng);
        for (int64_t i = 0; i < o.n; ++i) at(r, slots[static_cast<size_t>(i)]) = true;
      }
    }
  } else {
    const int64_t bh = o.block_rows > 0 ? o.block_rows : 1, bw = o.block_cols > 0 ? o.block_cols : bh;
    for (int64_t br = 0; br < rows / bh; ++br) {
      for (int64_t bc = 0; bc < cols / bw; ++bc) {
        const bool kept = br != 1 && u(rng) < c.density;
        for (int64_t r = br * bh; r < (br + 1) * bh; ++r) {
          for (int64_t k = bc * bw; k < (bc + 1) * bw; ++k) at(r, k) = kept;
        }
      }
    }
  }
  return keep;
}

// A [rows, cols] operand of the case in `format` (dense: the same values,
// zeros outside the pattern), in `dtype` on `device`. n:m keeps its pattern
// with row 1's values zero (stored zeros: an n:m group always holds n).
inline Tensor sparse_operand(const SparseCase& c, const std::string& format, int64_t rows, int64_t cols, uint64_t seed,
                             DType dtype, const Device& device) {
  const std::vector<bool> keep = pattern(c, rows, cols, seed);
  std::vector<double> mask(keep.size()), row_alive(static_cast<size_t>(rows * cols), 1.0);
  for (size_t i = 0; i < keep.size(); ++i) mask[i] = keep[i] ? 1.0 : 0.0;
  for (int64_t k = 0; k < cols && rows > 1; ++k) row_alive[static_cast<size_t>(cols + k)] = 0.0;
  const Tensor values = mul(mul(full_values({rows, cols}, seed + 1), from_vector(row_alive, {rows, cols})),
                            from_vector(mask, {rows, cols}))
                            .to(dtype)
                            .to(device);
  if (format == "dense") return values;
  const Tensor m = ne(from_vector(mask, {rows, cols}), 0.0).to(device);
  return sparse_from_mask(values, m, format, c.options);
}

}  // namespace coppice::parity
