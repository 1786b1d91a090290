#include "sparse/levels/level_tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tensor/checked_math.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::levels {
namespace {

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

std::vector<int64_t> as_i64(const Tensor& t) { return t.to(DType::kI64).contiguous().to_vector<int64_t>(); }

Tensor index_tensor(const std::vector<int64_t>& v, DType dtype) {
  return from_vector(v, {static_cast<int64_t>(v.size())}).to(dtype);
}

std::string level_label(const LevelFormat& f, size_t k) {
  const Level& l = f.levels[k];
  return str_cat("level ", k, " (", level_type_name(l.type), "(", l.dim, "))");
}

// The tensor coordinates of a point given by the dimensions the levels walk.
void tensor_coordinates(const LevelFormat& f, const Shape& shape, const std::vector<int64_t>& at, int64_t* out) {
  const size_t rank = shape.size();
  for (size_t d = 0; d < rank; ++d) out[d] = f.block.empty() ? at[d] : at[d] * f.block[d] + at[rank + d];
}

// The depth-first walk that lays out a level tensor from its stored points,
// each with the index of its value in a source (a dense tensor's flat
// offset, another level tensor's value position). Visiting the parents of a
// level in increasing position order and appending each one's children keeps
// every level's parts in level order.
class Builder {
 public:
  Builder(const LevelFormat& f, const Shape& shape, std::string_view op)
      : f_(f),
        shape_(shape),
        extents_(level_extents(f, shape)),
        levels_(f.levels.size()),
        pos_(levels_),
        crd_(levels_),
        at_(extents_.size(), 0),
        dims_(extents_.size(), 0),
        op_(op) {}

  // A stored point at tensor coordinates `coords` whose value is source[source].
  void add_point(const int64_t* coords, int64_t source) {
    const size_t rank = shape_.size();
    for (size_t d = 0; d < rank; ++d) {
      if (f_.block.empty()) {
        dims_[d] = coords[d];
      } else {
        dims_[d] = coords[d] / f_.block[d];
        dims_[rank + d] = coords[d] % f_.block[d];
      }
    }
    for (const Level& l : f_.levels) unsorted_.push_back(dims_[static_cast<size_t>(l.dim)]);
    unsorted_sources_.push_back(source);
  }

  // Lays the points out: sorted in level order, ranged widths measured, walked.
  void build() {
    sort_points();
    measure_ranged_widths();
    for (size_t l = 0; l < levels_; ++l) {
      if (f_.levels[l].type == LevelType::kCompressed) pos_[l].push_back(0);
    }
    visit(0, 0, count_, false);
  }

  // The level tensor, its values taken from `source` (contiguous, indexed as
  // the points' sources): a copy of the bytes where one point is stored at a
  // position, zero where none is, the sum where several are (a non-unique
  // source's duplicates, into a format whose levels are unique).
  LevelTensor result(const Tensor& source) const {
    LevelTensor t{f_, shape_, std::vector<Tensor>(levels_), std::vector<Tensor>(levels_), Tensor()};
    for (size_t l = 0; l < levels_; ++l) {
      const LevelType type = f_.levels[l].type;
      const DType index = index_dtype_of(f_, l);
      if (type == LevelType::kCompressed) t.positions[l] = index_tensor(pos_[l], index);
      if (type != LevelType::kDense) t.coordinates[l] = index_tensor(crd_[l], index);
    }
    const size_t item = dtype_size(source.dtype());
    t.values = empty({static_cast<int64_t>(leaves_.size())}, TensorOptions(source.dtype()));
    auto* out = static_cast<uint8_t*>(t.values.data_ptr());
    const auto* in = static_cast<const uint8_t*>(source.data_ptr());
    std::vector<double> as_f64;  // read only where points share a position
    for (size_t i = 0; i < leaves_.size(); ++i) {
      const auto [lo, hi] = leaves_[i];
      if (hi - lo == 1) {
        std::memcpy(out + i * item, in + static_cast<size_t>(sources_[lo]) * item, item);
      } else if (hi == lo) {
        std::memset(out + i * item, 0, item);
      } else {
        if (as_f64.empty()) as_f64 = source.reshape({-1}).to(DType::kF64).to_vector<double>();
        double sum = 0.0;
        for (size_t j = lo; j < hi; ++j) sum += as_f64[static_cast<size_t>(sources_[j])];
        const Tensor one = from_vector(std::vector<double>{sum}, {1}).to(source.dtype());
        std::memcpy(out + i * item, one.data_ptr(), item);
      }
    }
    if (f_.value_dtype) t.values = t.values.to(*f_.value_dtype);  // the declaration's, rounded once
    return t;
  }

 private:
  void sort_points() {
    count_ = unsorted_sources_.size();
    std::vector<size_t> order(count_);
    std::iota(order.begin(), order.end(), size_t{0});
    const auto row = [&](size_t p) { return unsorted_.begin() + static_cast<std::ptrdiff_t>(p * levels_); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::lexicographical_compare(row(a), row(a) + static_cast<std::ptrdiff_t>(levels_), row(b),
                                          row(b) + static_cast<std::ptrdiff_t>(levels_));
    });
    points_.reserve(unsorted_.size());
    sources_.reserve(count_);
    for (size_t p : order) {
      points_.insert(points_.end(), row(p), row(p) + static_cast<std::ptrdiff_t>(levels_));
      sources_.push_back(unsorted_sources_[p]);
    }
  }

  // A ranged level's width: the most distinct coordinates any parent holds.
  void measure_ranged_widths() {
    widths_.assign(levels_, 0);
    for (size_t l = 0; l < levels_; ++l) {
      if (f_.levels[l].type != LevelType::kRanged) continue;
      int64_t run = 0;
      for (size_t p = 0; p < count_; ++p) {
        const bool same_parent =
            p > 0 && std::equal(&points_[p * levels_], &points_[p * levels_ + l], &points_[(p - 1) * levels_]);
        if (!same_parent) run = 0;
        if (!same_parent || at(p, l) != at(p - 1, l)) ++run;
        widths_[l] = std::max(widths_[l], run);
      }
    }
  }

  int64_t at(size_t p, size_t l) const { return points_[p * levels_ + l]; }
  size_t run_end(size_t i, size_t hi, size_t l) const {
    size_t j = i + 1;
    while (j < hi && at(j, l) == at(i, l)) ++j;
    return j;
  }

  // Points [lo, hi) share the coordinates of levels before l; `padding`: a
  // ranged level's padding slot above (its entries are not stored).
  void visit(size_t l, size_t lo, size_t hi, bool padding) {
    if (l == levels_) {
      leaves_.emplace_back(padding ? hi : lo, hi);
      return;
    }
    const Level& level = f_.levels[l];
    const auto dim = static_cast<size_t>(level.dim);
    const int64_t extent = extents_[dim];
    switch (level.type) {
      case LevelType::kDense: {
        size_t i = lo;
        for (int64_t c = 0; c < extent; ++c) {
          size_t j = i;
          while (j < hi && at(j, l) == c) ++j;
          at_[dim] = c;
          visit(l + 1, i, j, padding);
          i = j;
        }
        break;
      }
      case LevelType::kCompressed:
      case LevelType::kRanged: {
        int64_t stored = 0;
        for (size_t i = lo; i < hi; ++stored) {
          const size_t j = level.type == LevelType::kCompressed && !level.unique ? i + 1 : run_end(i, hi, l);
          crd_[l].push_back(at(i, l));
          at_[dim] = at(i, l);
          visit(l + 1, i, j, padding);
          i = j;
        }
        if (level.type == LevelType::kCompressed) {
          pos_[l].push_back(static_cast<int64_t>(crd_[l].size()));
        } else {
          for (; stored < widths_[l]; ++stored) {
            crd_[l].push_back(-1);
            at_[dim] = 0;
            visit(l + 1, hi, hi, true);
          }
        }
        break;
      }
      case LevelType::kSingleton:  // exactly one point: the level above is non-unique
        crd_[l].push_back(at(lo, l));
        at_[dim] = at(lo, l);
        visit(l + 1, lo, hi, padding);
        break;
      case LevelType::kNOutOfM: {
        size_t i = lo;
        for (int64_t g = 0; g < extent / level.m; ++g) {
          std::vector<std::pair<size_t, size_t>> runs(static_cast<size_t>(level.m), {hi, hi});
          int64_t stored = 0;
          while (i < hi && at(i, l) < (g + 1) * level.m) {
            const size_t j = run_end(i, hi, l);
            runs[static_cast<size_t>(at(i, l) - g * level.m)] = {i, j};
            ++stored;
            i = j;
          }
          COPPICE_CHECK(stored <= level.n, op_, ": ", level_label(f_, l), ": group ", g, " (coordinates ", g * level.m,
                        " to ", (g + 1) * level.m - 1, ") of a parent stores ", stored,
                        " entries, more than n = ", level.n);
          // The stored places and the lowest free ones, increasing.
          int64_t free = level.n - stored;
          for (int64_t q = 0; q < level.m; ++q) {
            const auto [a, b] = runs[static_cast<size_t>(q)];
            const bool is_stored = a != b;
            if (!is_stored && free == 0) continue;
            if (!is_stored) --free;
            crd_[l].push_back(q);
            at_[dim] = g * level.m + q;
            visit(l + 1, a, b, padding);
          }
        }
        break;
      }
    }
  }

  const LevelFormat& f_;
  const Shape& shape_;
  const Shape extents_;
  const size_t levels_;
  std::vector<int64_t> unsorted_, unsorted_sources_;
  std::vector<int64_t> points_;   // the stored points' coordinates in level order, sorted
  std::vector<int64_t> sources_;  // each sorted point's value index in the source
  size_t count_ = 0;
  std::vector<int64_t> widths_;
  std::vector<std::vector<int64_t>> pos_, crd_;
  std::vector<std::pair<size_t, size_t>> leaves_;  // each stored position's points [lo, hi) (none: a zero)
  std::vector<int64_t> at_;                        // the walk's coordinates, by dimension
  std::vector<int64_t> dims_;
  std::string op_;
};

// Calls visit(at, p) for every stored position p of a checked level tensor
// with `at` its coordinates by the dimensions the levels walk; ranged padding
// is skipped.
template <typename Visit>
void for_each_stored(const LevelTensor& t, Visit visit) {
  const LevelFormat& f = t.format;
  const size_t levels = f.levels.size();
  const Shape extents = level_extents(f, t.shape);
  std::vector<std::vector<int64_t>> pos(levels), crd(levels);
  std::vector<int64_t> widths(levels, 0);
  int64_t parents = 1;
  for (size_t l = 0; l < levels; ++l) {
    const Level& level = f.levels[l];
    if (t.positions[l].defined()) pos[l] = as_i64(t.positions[l]);
    if (t.coordinates[l].defined()) crd[l] = as_i64(t.coordinates[l]);
    const int64_t extent = extents[static_cast<size_t>(level.dim)];
    switch (level.type) {
      case LevelType::kDense: parents *= extent; break;
      case LevelType::kCompressed: parents = pos[l].back(); break;
      case LevelType::kSingleton: break;
      case LevelType::kRanged:
        widths[l] = parents > 0 ? static_cast<int64_t>(crd[l].size()) / parents : 0;
        parents *= widths[l];
        break;
      case LevelType::kNOutOfM: parents *= extent / level.m * level.n; break;
    }
  }
  std::vector<int64_t> at(extents.size(), 0);
  auto walk = [&](auto&& self, size_t l, int64_t p) -> void {
    if (l == levels) {
      visit(at, p);
      return;
    }
    const Level& level = f.levels[l];
    const auto dim = static_cast<size_t>(level.dim);
    const int64_t extent = extents[dim];
    const std::vector<int64_t>& c = crd[l];
    switch (level.type) {
      case LevelType::kDense:
        for (int64_t i = 0; i < extent; ++i) {
          at[dim] = i;
          self(self, l + 1, p * extent + i);
        }
        break;
      case LevelType::kCompressed:
        for (int64_t q = pos[l][static_cast<size_t>(p)]; q < pos[l][static_cast<size_t>(p) + 1]; ++q) {
          at[dim] = c[static_cast<size_t>(q)];
          self(self, l + 1, q);
        }
        break;
      case LevelType::kSingleton:
        at[dim] = c[static_cast<size_t>(p)];
        self(self, l + 1, p);
        break;
      case LevelType::kRanged:
        for (int64_t q = p * widths[l]; q < (p + 1) * widths[l]; ++q) {
          if (c[static_cast<size_t>(q)] < 0) continue;
          at[dim] = c[static_cast<size_t>(q)];
          self(self, l + 1, q);
        }
        break;
      case LevelType::kNOutOfM: {
        const int64_t groups = extent / level.m;
        for (int64_t g = 0; g < groups; ++g) {
          for (int64_t s = 0; s < level.n; ++s) {
            const int64_t q = (p * groups + g) * level.n + s;
            at[dim] = g * level.m + c[static_cast<size_t>(q)];
            self(self, l + 1, q);
          }
        }
        break;
      }
    }
  };
  walk(walk, 0, 0);
}

void check_index_part(const Tensor& t, const LevelFormat& f, size_t l, const char* part, int64_t size,
                      std::string_view op) {
  const std::string where = str_cat(op, ": ", level_label(f, l), ": ", part);
  COPPICE_CHECK(t.defined(), where, " is missing");
  COPPICE_CHECK(t.dim() == 1 && t.numel() == size, where, " must be 1-D of ", size, " entries, got shape ",
                shape_to_string(t.shape()));
  COPPICE_CHECK(t.dtype() == index_dtype_of(f, l), where, " must be ", dtype_name(index_dtype_of(f, l)), ", got ",
                dtype_name(t.dtype()));
  COPPICE_CHECK(t.device().is_cpu(), where, " must be on the CPU, got ", t.device().to_string());
}

}  // namespace

LevelTensor level_tensor_to(const LevelTensor& t, Device device) {
  LevelTensor out = t;
  for (Tensor& p : out.positions)
    if (p.defined()) p = p.to(device);
  for (Tensor& c : out.coordinates)
    if (c.defined()) c = c.to(device);
  out.values = t.values.to(device);
  return out;
}

std::map<std::string, Tensor> level_parts(const LevelTensor& t) {
  std::map<std::string, Tensor> parts{{"values", t.values}};
  for (size_t l = 0; l < t.positions.size(); ++l) {
    if (t.positions[l].defined()) parts[str_cat("positions_", l)] = t.positions[l];
    if (t.coordinates[l].defined()) parts[str_cat("coordinates_", l)] = t.coordinates[l];
  }
  return parts;
}

namespace {

// The level index k of a part named "<prefix>k", or -1.
int64_t level_of(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) return -1;
  int64_t k = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || k > 1'000'000) return -1;
    k = k * 10 + (name[i] - '0');
  }
  return k;
}

}  // namespace

LevelTensor level_tensor_from_parts(const LevelFormat& format, const Shape& shape,
                                    const std::map<std::string, Tensor>& parts, std::string_view op) {
  LevelTensor t;
  t.format = format;
  t.shape = shape;
  const auto levels = static_cast<int64_t>(format.levels.size());
  t.positions.resize(static_cast<size_t>(levels));
  t.coordinates.resize(static_cast<size_t>(levels));
  for (const auto& [name, part] : parts) {
    const int64_t p = level_of(name, "positions_"), c = level_of(name, "coordinates_");
    if (name == "values") {
      t.values = part;
    } else if (p >= 0 && p < levels) {
      t.positions[static_cast<size_t>(p)] = part;
    } else if (c >= 0 && c < levels) {
      t.coordinates[static_cast<size_t>(c)] = part;
    } else {
      fail(op, ": no part '", name, "' in a tensor of ", levels, " levels (positions_<k>, coordinates_<k>, values)");
    }
  }
  check_level_tensor(t, op);
  return t;
}

LevelTensor level_from_mask(const Tensor& dense, const Tensor& mask, const LevelFormat& format, std::string_view op) {
  COPPICE_CHECK(dense.defined() && dense.is_dense() && dense.device().is_cpu(), op, ": needs dense values on the CPU");
  COPPICE_CHECK(mask.defined() && mask.is_dense() && mask.dtype() == DType::kBool && mask.shape() == dense.shape(), op,
                ": the mask must be a dense bool tensor of the values' shape ", shape_to_string(dense.shape()));
  check_level_format(format, dense.shape(), op);
  const Tensor keep = mask.to(Device::cpu()).to(DType::kU8).contiguous();
  const auto* kept = static_cast<const uint8_t*>(keep.data_ptr());
  const std::vector<int64_t> strides = strides_of(dense.shape());
  std::vector<int64_t> coords(dense.shape().size());
  Builder builder(format, dense.shape(), op);
  for (int64_t flat = 0; flat < dense.numel(); ++flat) {
    if (kept[flat] == 0) continue;
    int64_t rest = flat;
    for (size_t d = 0; d < coords.size(); ++d) {
      coords[d] = rest / strides[d];
      rest %= strides[d];
    }
    builder.add_point(coords.data(), flat);
  }
  builder.build();
  return builder.result(dense.contiguous());
}

LevelTensor level_convert(const LevelTensor& t, const LevelFormat& format, std::string_view op) {
  check_level_tensor(t, op);
  check_level_format(format, t.shape, op);
  std::vector<int64_t> coords(t.shape.size());
  Builder builder(format, t.shape, op);
  for_each_stored(t, [&](const std::vector<int64_t>& at, int64_t p) {
    tensor_coordinates(t.format, t.shape, at, coords.data());
    builder.add_point(coords.data(), p);
  });
  builder.build();
  return builder.result(t.values.contiguous());
}

void check_level_tensor(const LevelTensor& t, std::string_view op) {
  const LevelFormat& f = t.format;
  check_level_format(f, t.shape, op);
  const size_t levels = f.levels.size();
  COPPICE_CHECK(t.positions.size() == levels && t.coordinates.size() == levels, op, ": ", levels,
                " levels, but parts for ", t.positions.size(), " and ", t.coordinates.size());
  const Shape extents = level_extents(f, t.shape);
  int64_t parents = 1;
  for (size_t l = 0; l < levels; ++l) {
    const Level& level = f.levels[l];
    const int64_t extent = extents[static_cast<size_t>(level.dim)];
    const std::string where = str_cat(op, ": ", level_label(f, l));
    COPPICE_CHECK(level.type == LevelType::kCompressed || !t.positions[l].defined(), where,
                  ": has positions, which only a compressed level stores");
    COPPICE_CHECK(level.type != LevelType::kDense || !t.coordinates[l].defined(), where,
                  ": has coordinates, which a dense level does not store");
    std::vector<int64_t> crd;
    auto coordinates = [&](int64_t size) {
      check_index_part(t.coordinates[l], f, l, "coordinates", size, op);
      crd = as_i64(t.coordinates[l]);
    };
    auto in_range = [&](int64_t c, size_t q, int64_t bound) {
      COPPICE_CHECK(c >= 0 && c < bound, where, ": coordinate ", q, " is ", c, ", outside [0, ", bound, ")");
    };
    // Positions are counted in int64: a shape whose levels would overflow them is refused, not wrapped.
    auto times = [&](int64_t a, int64_t b) {
      int64_t product = 0;
      COPPICE_CHECK(!mul_overflows(a, b, &product), where, ": ", a, " x ", b, " positions overflow int64");
      return product;
    };
    switch (level.type) {
      case LevelType::kDense: parents = times(parents, extent); break;
      case LevelType::kCompressed: {
        check_index_part(t.positions[l], f, l, "positions", parents + 1, op);
        const std::vector<int64_t> pos = as_i64(t.positions[l]);
        COPPICE_CHECK(pos[0] == 0, where, ": positions must start at 0, got ", pos[0]);
        for (size_t p = 1; p < pos.size(); ++p) {
          COPPICE_CHECK(pos[p] >= pos[p - 1], where, ": positions decrease at ", p, " (", pos[p - 1], " then ", pos[p],
                        ")");
        }
        coordinates(pos.back());
        for (size_t p = 0; p + 1 < pos.size(); ++p) {
          for (auto q = static_cast<size_t>(pos[p]); q < static_cast<size_t>(pos[p + 1]); ++q) {
            in_range(crd[q], q, extent);
            COPPICE_CHECK(!level.unique || q == static_cast<size_t>(pos[p]) || crd[q] > crd[q - 1], where,
                          ": coordinates of parent ", p, " are not increasing at ", q);
          }
        }
        parents = pos.back();
        break;
      }
      case LevelType::kSingleton:
        coordinates(parents);
        for (size_t q = 0; q < crd.size(); ++q) in_range(crd[q], q, extent);
        break;
      case LevelType::kRanged: {
        const int64_t size = t.coordinates[l].defined() ? t.coordinates[l].numel() : 0;
        COPPICE_CHECK(parents > 0 ? size % parents == 0 : size == 0, where, ": ", size,
                      " coordinates are not the same number for each of ", parents, " parents");
        coordinates(size);
        const int64_t width = parents > 0 ? size / parents : 0;
        for (size_t q = 0; q < crd.size(); ++q) {
          const bool first = q % static_cast<size_t>(width) == 0;
          if (crd[q] == -1) continue;
          in_range(crd[q], q, extent);
          COPPICE_CHECK(first || (crd[q - 1] != -1 && crd[q] > crd[q - 1]), where, ": slot ", q,
                        " is not increasing, or follows padding");
        }
        parents = times(parents, width);
        break;
      }
      case LevelType::kNOutOfM: {
        const int64_t slots = times(times(parents, extent / level.m), level.n);
        coordinates(slots);
        for (size_t q = 0; q < crd.size(); ++q) {
          in_range(crd[q], q, level.m);
          COPPICE_CHECK(q % static_cast<size_t>(level.n) == 0 || crd[q] > crd[q - 1], where, ": places of group ",
                        q / static_cast<size_t>(level.n), " are not increasing at ", q);
        }
        parents = slots;
        break;
      }
    }
  }
  COPPICE_CHECK(t.values.defined() && t.values.dim() == 1 && t.values.numel() == parents, op,
                ": values must be 1-D of ", parents, " entries (the last level's positions), got ",
                t.values.defined() ? shape_to_string(t.values.shape()) : std::string("none"));
  COPPICE_CHECK(t.values.device().is_cpu(), op, ": values must be on the CPU, got ", t.values.device().to_string());
  COPPICE_CHECK(is_floating(t.values.dtype()) && (!f.value_dtype || t.values.dtype() == *f.value_dtype), op,
                ": values must be ", f.value_dtype ? std::string(dtype_name(*f.value_dtype)) : "f32, f64, bf16 or f16",
                ", got ", dtype_name(t.values.dtype()));
}

std::vector<int64_t> level_stored_positions(const LevelTensor& t) {
  check_level_tensor(t, "level_stored_positions");
  const std::vector<int64_t> strides = strides_of(t.shape);
  std::vector<int64_t> coords(t.shape.size());
  std::vector<int64_t> out(static_cast<size_t>(t.values.numel()), -1);
  for_each_stored(t, [&](const std::vector<int64_t>& at, int64_t p) {
    tensor_coordinates(t.format, t.shape, at, coords.data());
    out[static_cast<size_t>(p)] = std::inner_product(coords.begin(), coords.end(), strides.begin(), int64_t{0});
  });
  return out;
}

Tensor level_to_dense(const LevelTensor& t) {
  check_level_tensor(t, "level_to_dense");
  const std::vector<int64_t> strides = strides_of(t.shape);
  std::vector<int64_t> coords(t.shape.size());
  const std::vector<double> values = t.values.to(DType::kF64).to_vector<double>();
  // An entry's first value is copied (f64 holds every values dtype exactly, -0 and NaN included), later
  // ones (a non-unique level's duplicates) added.
  std::vector<double> out(static_cast<size_t>(shape_numel(t.shape)), 0.0);
  std::vector<char> written(out.size(), 0);
  for_each_stored(t, [&](const std::vector<int64_t>& at, int64_t p) {
    tensor_coordinates(t.format, t.shape, at, coords.data());
    const auto offset = static_cast<size_t>(std::inner_product(coords.begin(), coords.end(), strides.begin(), 0L));
    out[offset] = written[offset] != 0 ? out[offset] + values[static_cast<size_t>(p)] : values[static_cast<size_t>(p)];
    written[offset] = 1;
  });
  return from_vector(out, t.shape, TensorOptions(DType::kF64)).to(t.values.dtype());
}

}  // namespace coppice::levels
