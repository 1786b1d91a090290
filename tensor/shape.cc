#include "tensor/shape.h"

#include "tensor/checked_math.h"
#include "tensor/error.h"

namespace coppice {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (mul_overflows(n, s, &n)) {
      fail("shape ", shape_to_string(shape), ": the element count overflows a 64-bit integer");
    }
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // A zero-size dim keeps the others' strides as if it were 1, so their
    // product may overflow even where the element count (0) does not.
    if (i > 0 && mul_overflows(s, std::max<int64_t>(shape[i], 1), &s)) {
      fail("shape ", shape_to_string(shape), ": the strides overflow a 64-bit integer");
    }
  }
  return strides;
}

std::string shape_to_string(const Shape& shape) { return "[" + str_join(shape, ", ") + "]"; }

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    COPPICE_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_to_string(a), " and ", shape_to_string(b),
                  " do not broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  COPPICE_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
                " dimensions (expected ", lo, "..", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace coppice
