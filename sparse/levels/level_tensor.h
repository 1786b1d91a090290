// A tensor stored in a level format (level_format.h), and what is derived
// from the declaration alone, with no code per format: building it from
// dense values and a mask, checking its parts, and its dense form. On the
// CPU; a first step of issue 35 (the format table, conversions between level
// formats by co-iteration and the generic kernels build on it).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/levels/level_format.h"
#include "tensor/tensor.h"

namespace coppice::levels {

struct LevelTensor {
  LevelFormat format;
  Shape shape;
  // Per level, its index parts, undefined where the level has none: positions
  // (compressed: [parents + 1]) and coordinates (compressed, singleton,
  // ranged, n_out_of_m), 1-D, in the level's index dtype.
  std::vector<Tensor> positions, coordinates;
  Tensor values;  // 1-D, one per position of the last level, in level order
};

// `t` with every part on `device` (host reads, such as the checks and the
// generic forms below, need its parts on the CPU).
LevelTensor level_tensor_to(const LevelTensor& t, Device device);

// The parts by name: "positions_<k>", "coordinates_<k>" (k the level) and
// "values": how a level tensor is saved.
std::map<std::string, Tensor> level_parts(const LevelTensor& t);

// level_parts inverted: a tensor of `format` and `shape` from its parts by
// name, checked (check_level_tensor). Throws naming `op` and the part for a
// name that is not one of a tensor of the format's level count
// (positions_<k>, coordinates_<k>, values).
LevelTensor level_tensor_from_parts(const LevelFormat& format, const Shape& shape,
                                    const std::map<std::string, Tensor>& parts, std::string_view op);

// The entries of `dense` (CPU) where the bool `mask` (same shape, CPU) holds,
// in `format`; zeros at the positions the format stores that the mask does
// not hold (the rest of a dense level or of a block, free places of an n:m
// group), padding (ranged) zero too. Throws naming `op` where the format
// cannot hold the mask (an n:m group with more than n entries) or the shape.
LevelTensor level_from_mask(const Tensor& dense, const Tensor& mask, const LevelFormat& format, std::string_view op);

// `t` in another level format of the same shape, by walking t's stored
// entries into the new layout (no dense intermediate): every stored entry is
// kept, explicit zeros included; positions the new format stores besides
// (the rest of a block, free n:m places) hold zeros; entries of one
// coordinate (t's duplicates) are summed. Throws naming `op` as
// level_from_mask does.
LevelTensor level_convert(const LevelTensor& t, const LevelFormat& format, std::string_view op);

// Throws naming `op`, the level and the first offending position where the
// parts do not form a tensor of the format and shape: sizes, positions not
// starting at 0 or decreasing, coordinates outside their dimension, unique
// levels not increasing within a parent, ranged padding before a coordinate,
// n:m places not increasing or outside [0, m), dtypes.
void check_level_tensor(const LevelTensor& t, std::string_view op);

// For every element of t.values, the row-major flat position (in t.shape)
// it stores, or -1 for ranged padding: what sparse/stored_positions.h gives
// for a tensor of a level format. A non-unique level's entries repeat
// positions. Checks the parts first.
std::vector<int64_t> level_stored_positions(const LevelTensor& t);

// The dense form (CPU, the values' dtype): each stored entry at its
// coordinates, entries of one coordinate (a non-unique level's) summed,
// padding ignored. Checks the parts first.
Tensor level_to_dense(const LevelTensor& t);

}  // namespace coppice::levels
