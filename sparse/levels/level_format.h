// Formats as levels (issue 35): a sparse format declared by what each of its
// levels stores, the model of TACO's level formats and of MLIR's
// sparse_tensor encodings, so that validation, conversion and generic
// kernels can be derived from the declaration instead of written per format.
//
// A level walks one dimension of the tensor, or of its blocked form: with
// `block` set, dimension d of extent E splits into an outer dimension d
// (E / block[d]) and an inner dimension rank + d (block[d]). Levels run
// outermost first, each dimension exactly once. A level stores, per parent
// position (the single root for the first level):
//   dense       every coordinate of its dimension, implicitly (no index part);
//   compressed  a run of coordinates: positions [parents + 1] and coordinates
//               (unique: distinct and increasing within a parent; non-unique:
//               one per stored point, COO's first level);
//   singleton   one coordinate (below a non-unique level: COO's later levels);
//   ranged      the same number of coordinate slots for every parent,
//               increasing, then padded with -1 (ELL);
//   n_out_of_m  for every group of m coordinates, n slots holding each stored
//               coordinate's place within its group, increasing (n:m); a group
//               with fewer stored entries stores zeros at free places.
// The built-in formats in these terms (builtin_levels.h):
//   csr (dense(0), compressed(1)), csc (dense(1), compressed(0)),
//   coo (compressed(0, non-unique), singleton(1), ...),
//   bsr blocked (dense(0), compressed(1), dense(2), dense(3)),
//   blocked_ell blocked (dense(0), ranged(1), dense(2), dense(3)),
//   nm (dense(0), ..., n_out_of_m(last)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice::levels {

enum class LevelType : uint8_t { kDense, kCompressed, kSingleton, kRanged, kNOutOfM };

struct Level {
  LevelType type = LevelType::kDense;
  int64_t dim = 0;     // the dimension (of the blocked form, when blocked) this level walks
  bool unique = true;  // kCompressed: a parent's coordinates are distinct
  int64_t n = 0;       // kNOutOfM: slots per group
  int64_t m = 0;       // kNOutOfM: group size
  // The dtype of this level's index parts; unset: the format's index_dtype.
  std::optional<DType> index_dtype;
};

Level dense(int64_t dim);
Level compressed(int64_t dim, bool unique = true);
Level singleton(int64_t dim);
Level ranged(int64_t dim);
Level n_out_of_m(int64_t dim, int64_t n, int64_t m);

struct LevelFormat {
  std::vector<int64_t> block;  // empty, or the inner extent of every tensor dimension
  std::vector<Level> levels;   // outermost first
  DType index_dtype = DType::kI32;
  // The values' dtype (f32, f64, bf16 or f16); unset: any of them, the
  // source's where a tensor is built.
  std::optional<DType> value_dtype;
};

std::string_view level_type_name(LevelType type);  // "dense", "compressed", ...
// The same block, levels and each level's index dtype (however spelled; the
// values' dtype aside): what tensors of the two lay out alike.
bool same_levels(const LevelFormat& a, const LevelFormat& b);
// The declaration as text, in the grammar parse_level_format reads:
// "blocked 2x2 (dense(0), compressed(1), dense(2), dense(3))", with
// "compressed(0, non-unique)", "n_out_of_m(1, 2:4)", a level's own index
// dtype as an argument ("n_out_of_m(1, 2:4, u8)"), the format's, where it
// is not i32, after the list ("(...) index i64") and the values' dtype, where
// the declaration fixes it, last ("(...) values bf16").
std::string describe(const LevelFormat& format);

// A declaration from text (describe's grammar):
//   format := ["blocked" INT {"x" INT}] "(" level {"," level} ")" ["index" DTYPE] ["values" DTYPE]
//   level  := TYPE ["(" arg {"," arg} ")"]
//   arg    := INT (the dimension walked; default: the level's place in the
//             list) | "non-unique" | INT ":" INT (n:m) | DTYPE (the level's
//             index dtype)
// Throws naming `op`, the level and what cannot be read. Only the grammar is
// checked here; check_level_format checks the declaration against a shape.
LevelFormat parse_level_format(std::string_view text, std::string_view op);
// One level of the grammar; `place`: its place in the list (the default dimension).
Level parse_level(std::string_view text, int64_t place, std::string_view op);
// A declaration from its fields, the map form YAML's sparsity.formats and a
// Python dict give: the levels' texts, outermost first (parse_level's
// grammar, each at its place), the block (empty: not blocked; one size:
// square; else rows and columns), the index dtype's name (i32 or i64) and
// the values' ("": any; f32, f64, bf16 or f16). Throws naming `where` and
// the field: "<where>.levels[1]: ...", "<where>.block: ...".
LevelFormat level_format_from_fields(const std::vector<std::string>& levels, const std::vector<int64_t>& block,
                                     std::string_view index, std::string_view values, std::string_view where);
// The dtype of level `level`'s index parts.
DType index_dtype_of(const LevelFormat& format, size_t level);

// The extents of the dimensions the levels walk, for a tensor of `shape`
// (the blocked form's 2 * rank when blocked). Call check_level_format first.
Shape level_extents(const LevelFormat& format, const Shape& shape);

// Throws, naming `op`, the level (its index and type) and the reason, when
// `format` cannot hold a tensor of `shape`: a dimension walked twice or not
// at all, a block that does not divide its dimension, a singleton not below
// a non-unique level or a level other than a singleton below one, n and m
// out of 1 <= n <= m <= 256 or m not dividing the dimension, an index dtype
// other than i32 or i64 (u8 too for n_out_of_m), a values dtype that is not
// a floating one.
void check_level_format(const LevelFormat& format, const Shape& shape, std::string_view op);

}  // namespace coppice::levels
