#include "sparse/levels/level_format.h"

#include <cctype>

#include "tensor/error.h"

namespace coppice::levels {

namespace {
Level level(LevelType type, int64_t dim) {
  Level out;
  out.type = type;
  out.dim = dim;
  return out;
}
}  // namespace

Level dense(int64_t dim) { return level(LevelType::kDense, dim); }
Level compressed(int64_t dim, bool unique) {
  Level out = level(LevelType::kCompressed, dim);
  out.unique = unique;
  return out;
}
Level singleton(int64_t dim) { return level(LevelType::kSingleton, dim); }
Level ranged(int64_t dim) { return level(LevelType::kRanged, dim); }
Level n_out_of_m(int64_t dim, int64_t n, int64_t m) {
  Level out = level(LevelType::kNOutOfM, dim);
  out.n = n;
  out.m = m;
  return out;
}

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
  if (l.index_dtype) s += str_cat(", ", dtype_name(*l.index_dtype));
  return s + ")";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// A non-negative decimal integer, or nullopt.
std::optional<int64_t> count_of(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// `s` split at the commas outside parentheses.
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')') --depth;
    if (s[i] == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  out.push_back(trim(s.substr(start)));
  return out;
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
  s += ")";
  if (format.index_dtype != DType::kI32) s += str_cat(" index ", dtype_name(format.index_dtype));
  if (format.value_dtype) s += str_cat(" values ", dtype_name(*format.value_dtype));
  return s;
}

Level parse_level(std::string_view text, int64_t place, std::string_view op) {
  const std::string_view whole = trim(text);
  const std::string what = str_cat(op, ": level ", place, " '", whole, "'");
  std::string_view name = whole, args;
  if (const size_t open = whole.find('('); open != std::string_view::npos) {
    COPPICE_CHECK(whole.back() == ')', what, ": an argument list must end the level with ')'");
    name = trim(whole.substr(0, open));
    args = whole.substr(open + 1, whole.size() - open - 2);
  }
  Level l;
  l.dim = place;
  if (name == "dense") {
    l.type = LevelType::kDense;
  } else if (name == "compressed") {
    l.type = LevelType::kCompressed;
  } else if (name == "singleton") {
    l.type = LevelType::kSingleton;
  } else if (name == "ranged") {
    l.type = LevelType::kRanged;
  } else if (name == "n_out_of_m") {
    l.type = LevelType::kNOutOfM;
  } else {
    fail(what, ": unknown level type '", name, "' (dense, compressed, singleton, ranged, n_out_of_m)");
  }
  bool has_dim = false;
  for (std::string_view arg : args.empty() ? std::vector<std::string_view>{} : split_top(args)) {
    DType dtype;
    if (const auto dim = count_of(arg)) {
      COPPICE_CHECK(!has_dim, what, ": names its dimension twice");
      l.dim = *dim;
      has_dim = true;
    } else if (arg == "non-unique" && l.type == LevelType::kCompressed) {
      l.unique = false;
    } else if (const size_t colon = arg.find(':'); colon != std::string_view::npos && l.type == LevelType::kNOutOfM) {
      const auto n = count_of(arg.substr(0, colon)), m = count_of(arg.substr(colon + 1));
      COPPICE_CHECK(n && m, what, ": '", arg, "' is not n:m");
      l.n = *n;
      l.m = *m;
    } else if (dtype_from_name(arg, &dtype)) {
      l.index_dtype = dtype;
    } else {
      fail(what, ": cannot read the argument '", arg, "' (a dimension, ",
           l.type == LevelType::kCompressed ? "non-unique, "
           : l.type == LevelType::kNOutOfM  ? "n:m, "
                                            : "",
           "or an index dtype)");
    }
  }
  COPPICE_CHECK(l.type != LevelType::kNOutOfM || l.m > 0, what, ": n_out_of_m needs its n:m, as n_out_of_m(", l.dim,
                ", 2:4)");
  return l;
}

LevelFormat level_format_from_fields(const std::vector<std::string>& levels, const std::vector<int64_t>& block,
                                     std::string_view index, std::string_view values, std::string_view where) {
  LevelFormat f;
  COPPICE_CHECK(!levels.empty(), where, ".levels: needs at least one level");
  for (size_t i = 0; i < levels.size(); ++i)
    f.levels.push_back(parse_level(levels[i], static_cast<int64_t>(i), str_cat(where, ".levels[", i, "]")));
  COPPICE_CHECK(block.size() <= 2, where, ".block: expected [rows, columns] or one size for both, got ", block.size(),
                " sizes");
  for (size_t i = 0; i < block.size(); ++i)
    COPPICE_CHECK(block[i] >= 1, where, ".block[", i, "]: a block extent must be >= 1, got ", block[i]);
  if (!block.empty()) f.block = {block.front(), block.back()};
  COPPICE_CHECK(index == "i32" || index == "i64", where, ".index: must be i32 or i64, got '", index, "'");
  f.index_dtype = index == "i32" ? DType::kI32 : DType::kI64;
  if (!values.empty()) {
    DType v = DType::kF32;
    COPPICE_CHECK(
        (values == "f32" || values == "f64" || values == "bf16" || values == "f16") && dtype_from_name(values, &v),
        where, ".values: must be f32, f64, bf16 or f16, got '", values, "'");
    f.value_dtype = v;
  }
  return f;
}

LevelFormat parse_level_format(std::string_view text, std::string_view op) {
  std::string_view s = trim(text);
  const std::string what = str_cat(op, ": format '", s, "'");
  LevelFormat f;
  if (s.substr(0, 7) == "blocked") {
    const size_t open = s.find('(');
    COPPICE_CHECK(open != std::string_view::npos, what, ": a level list in parentheses must follow the block");
    std::string_view block = trim(s.substr(7, open - 7));
    while (true) {
      const size_t x = block.find('x');
      const auto extent = count_of(block.substr(0, x));
      COPPICE_CHECK(extent && *extent > 0, what, ": the block must be positive extents joined by x, as blocked 2x4");
      f.block.push_back(*extent);
      if (x == std::string_view::npos) break;
      block.remove_prefix(x + 1);
    }
    s = trim(s.substr(open));
  }
  COPPICE_CHECK(!s.empty() && s.front() == '(', what,
                ": the levels must be a list in parentheses, as (dense, compressed)");
  const size_t close = s.rfind(')');
  COPPICE_CHECK(close != std::string_view::npos, what, ": the level list has no closing ')'");
  std::string_view tail = trim(s.substr(close + 1));
  const std::string after =
      str_cat(what, ": after the levels only 'index DTYPE' and 'values DTYPE' may follow, got '", tail, "'");
  if (tail.substr(0, 5) == "index") {
    const size_t end = tail.find("values");
    COPPICE_CHECK(dtype_from_name(trim(tail.substr(5, end == std::string_view::npos ? end : end - 5)), &f.index_dtype),
                  after);
    tail = end == std::string_view::npos ? std::string_view() : tail.substr(end);
  }
  if (!tail.empty()) {
    DType values;
    COPPICE_CHECK(tail.substr(0, 6) == "values" && dtype_from_name(trim(tail.substr(6)), &values), after);
    f.value_dtype = values;
  }
  const std::vector<std::string_view> levels = split_top(s.substr(1, close - 1));
  for (size_t k = 0; k < levels.size(); ++k) f.levels.push_back(parse_level(levels[k], static_cast<int64_t>(k), op));
  return f;
}

DType index_dtype_of(const LevelFormat& format, size_t level) {
  return format.levels[level].index_dtype.value_or(format.index_dtype);
}

bool same_levels(const LevelFormat& a, const LevelFormat& b) {
  if (a.block != b.block || a.levels.size() != b.levels.size()) return false;
  for (size_t k = 0; k < a.levels.size(); ++k) {
    const Level &x = a.levels[k], &y = b.levels[k];
    if (x.type != y.type || x.dim != y.dim || x.unique != y.unique || x.n != y.n || x.m != y.m ||
        index_dtype_of(a, k) != index_dtype_of(b, k)) {
      return false;
    }
  }
  return true;
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
  if (format.value_dtype) {
    COPPICE_CHECK(is_floating(*format.value_dtype), what, ": values dtype ", dtype_name(*format.value_dtype),
                  " (f32, f64, bf16 or f16)");
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
