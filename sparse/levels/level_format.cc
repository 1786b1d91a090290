#include "sparse/levels/level_format.h"

#include "tensor/error.h"

namespace coppice::levels {

Level dense(int64_t dim) { return Level{LevelType::kDense, dim}; }
Level compressed(int64_t dim, bool unique) { return Level{LevelType::kCompressed, dim, unique}; }
Level singleton(int64_t dim) { return Level{LevelType::kSingleton, dim}; }
Level ranged(int64_t dim) { return Level{LevelType::kRanged, dim}; }
Level n_out_of_m(int64_t dim, int64_t n, int64_t m) { return Level{LevelType::kNOutOfM, dim, true, n, m}; }

std::string_view level_type_name(LevelType type) {
  switch (type) {
    case LevelType::kDense: return "dense";
    case LevelType::kCompressed: return "compressed";
    case LevelType::kSingleton: return "singleton";
    case LevelType::kRanged: return "ranged";
    case LevelType::kNOutOfM: return "n_out_of_m";
  }
  return "?";
}

namespace {

std::string describe_level(const Level& l) {
  std::string s = str_cat(level_type_name(l.type), "(", l.dim);
  if (l.type == LevelType::kCompressed && !l.unique) s += ", non-unique";
  if (l.type == LevelType::kNOutOfM) s += str_cat(", ", l.n, ":", l.m);
  return s + ")";
}

std::string level_name(const LevelFormat& f, size_t k) {
  return str_cat("level ", k, " (", describe_level(f.levels[k]), ")");
}

}  // namespace

std::string describe(const LevelFormat& format) {
  std::string s;
  if (!format.block.empty()) {
    s = "blocked ";
    for (size_t d = 0; d < format.block.size(); ++d) s += str_cat(d == 0 ? "" : "x", format.block[d]);
    s += " ";
  }
  s += "(";
  for (size_t k = 0; k < format.levels.size(); ++k) s += str_cat(k == 0 ? "" : ", ", describe_level(format.levels[k]));
  return s + ")";
}

DType index_dtype_of(const LevelFormat& format, size_t level) {
  return format.levels[level].index_dtype.value_or(format.index_dtype);
}

Shape level_extents(const LevelFormat& format, const Shape& shape) {
  if (format.block.empty()) return shape;
  Shape extents(shape.size() * 2);
  for (size_t d = 0; d < shape.size(); ++d) {
    extents[d] = shape[d] / format.block[d];
    extents[shape.size() + d] = format.block[d];
  }
  return extents;
}

void check_level_format(const LevelFormat& format, const Shape& shape, std::string_view op) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const std::string what = str_cat(op, ": format ", describe(format));
  COPPICE_CHECK(rank >= 1, what, ": needs a tensor of at least one dimension, got shape ", shape_to_string(shape));
  if (!format.block.empty()) {
    COPPICE_CHECK(static_cast<int64_t>(format.block.size()) == rank, what, ": a block of ", format.block.size(),
                  " extents for a tensor of ", rank, " dimensions ", shape_to_string(shape));
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t b = format.block[static_cast<size_t>(d)];
      COPPICE_CHECK(b >= 1 && shape[static_cast<size_t>(d)] % b == 0, what, ": block extent ", b,
                    " does not divide dimension ", d, " of extent ", shape[static_cast<size_t>(d)]);
    }
  }
  const Shape extents = level_extents(format, shape);
  const int64_t dims = static_cast<int64_t>(extents.size());
  COPPICE_CHECK(static_cast<int64_t>(format.levels.size()) == dims, what, ": ", format.levels.size(),
                " levels for the ", dims, " dimensions of a ", format.block.empty() ? "" : "blocked ",
                "tensor of shape ", shape_to_string(shape), " (one level per dimension)");
  std::vector<int64_t> walker(static_cast<size_t>(dims), -1);
  for (size_t k = 0; k < format.levels.size(); ++k) {
    const Level& l = format.levels[k];
    const std::string where = str_cat(what, ": ", level_name(format, k));
    COPPICE_CHECK(l.dim >= 0 && l.dim < dims, where, ": walks dimension ", l.dim, ", outside [0, ", dims, ")");
    COPPICE_CHECK(walker[static_cast<size_t>(l.dim)] < 0, where, ": walks dimension ", l.dim, ", which level ",
                  walker[static_cast<size_t>(l.dim)], " already walks");
    walker[static_cast<size_t>(l.dim)] = static_cast<int64_t>(k);
    const bool below_non_unique =
        k > 0 && (format.levels[k - 1].type == LevelType::kSingleton ||
                  (format.levels[k - 1].type == LevelType::kCompressed && !format.levels[k - 1].unique));
    if (l.type == LevelType::kSingleton) {
      COPPICE_CHECK(below_non_unique, where, ": a singleton must follow a non-unique compressed level or a singleton");
    } else {
      COPPICE_CHECK(!below_non_unique, where,
                    ": below a non-unique level every level must be a singleton (each "
                    "stored point keeps its own path)");
    }
    const DType index = index_dtype_of(format, k);
    const bool small = l.type == LevelType::kNOutOfM && index == DType::kU8;
    COPPICE_CHECK(l.type == LevelType::kDense || index == DType::kI32 || index == DType::kI64 || small, where,
                  ": index dtype ", dtype_name(index), " (i32 or i64; u8 for n_out_of_m)");
    if (l.type == LevelType::kNOutOfM) {
      const int64_t extent = extents[static_cast<size_t>(l.dim)];
      COPPICE_CHECK(l.n >= 1 && l.n <= l.m && l.m <= 256, where, ": n and m must satisfy 1 <= n <= m <= 256");
      COPPICE_CHECK(extent % l.m == 0, where, ": m = ", l.m, " does not divide dimension ", l.dim, " of extent ",
                    extent);
    }
  }
  for (int64_t d = 0; d < dims; ++d) {
    COPPICE_CHECK(walker[static_cast<size_t>(d)] >= 0, what, ": no level walks dimension ", d);
  }
}

}  // namespace coppice::levels
