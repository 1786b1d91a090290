// Shapes and strides, and the broadcasting rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coppice {

using Shape = std::vector<int64_t>;

// The product of the sizes; throws coppice::Error naming the shape when it
// overflows int64 (sizes that come from outside must not wrap).
int64_t shape_numel(const Shape& shape);
// Row-major strides; throws coppice::Error when they overflow int64.
Shape contiguous_strides(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[2, 3]"

// The broadcast of two shapes (NumPy rules); throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);

}  // namespace coppice
