#include "autograd/functions/rearrange.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <vector>

#include "autograd/functions/shape.h"
#include "autograd/functions/sparse.h"
#include "autograd/no_grad.h"
#include "tensor/checked_math.h"

namespace coppice {
namespace {

using Group = std::vector<std::string>;  // one dim: its axes, row-major

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Group> parse_side(std::string_view text, std::string_view pattern, const char* side) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  std::vector<Group> groups;
  // Scorch's spelling: one axis per character.
  if (text.find_first_of(" ()") == std::string_view::npos) {
    for (char c : text) {
      COPPICE_CHECK(is_name_char(c), "rearrange '", pattern, "': the ", side, " side has '", c,
                    "'; axis names are letters, digits and '_'");
      groups.push_back({std::string(1, c)});
    }
    return groups;
  }
  bool in_group = false;
  std::string name;
  auto flush = [&] {
    if (name.empty()) return;
    if (in_group)
      groups.back().push_back(name);
    else
      groups.push_back({name});
    name.clear();
  };
  for (char c : text) {
    if (c == ' ') {
      flush();
    } else if (c == '(') {
      COPPICE_CHECK(!in_group, "rearrange '", pattern, "': nested '(' on the ", side, " side");
      flush();
      groups.emplace_back();
      in_group = true;
    } else if (c == ')') {
      COPPICE_CHECK(in_group, "rearrange '", pattern, "': ')' without '(' on the ", side, " side");
      flush();
      in_group = false;
    } else {
      COPPICE_CHECK(is_name_char(c), "rearrange '", pattern, "': the ", side, " side has '", c,
                    "'; axis names are letters, digits and '_'");
      name += c;
    }
  }
  COPPICE_CHECK(!in_group, "rearrange '", pattern, "': '(' not closed on the ", side, " side");
  flush();
  return groups;
}

// The parsed pattern against x's shape: every axis with its size, in the
// order the left side lists them, then the new ones.
struct Arrangement {
  std::vector<std::string> axes;
  std::vector<int64_t> sizes;
  int64_t input_axes = 0;
  std::vector<std::vector<int64_t>> out_dims;  // axis ids per output dim
};

Arrangement arrange(const Shape& shape, std::string_view pattern, const std::map<std::string, int64_t>& given) {
  const size_t arrow = pattern.find("->");
  COPPICE_CHECK(arrow != std::string_view::npos && pattern.find("->", arrow + 2) == std::string_view::npos,
                "rearrange '", pattern, "': expected one \"->\" between the two sides");
  std::vector<Group> left = parse_side(pattern.substr(0, arrow), pattern, "left");
  std::vector<Group> right = parse_side(pattern.substr(arrow + 2), pattern, "right");
  COPPICE_CHECK(left.size() == shape.size(), "rearrange '", pattern, "': the left side names ", left.size(),
                " dim(s), the operand has ", shape.size(), " (shape ", shape_to_string(shape), ")");
  for (const auto& [name, size] : given)
    COPPICE_CHECK(size >= 0, "rearrange '", pattern, "': axis '", name, "' has a negative size ", size);

  Arrangement a;
  auto id_of = [&](const std::string& name) {
    return static_cast<int64_t>(std::find(a.axes.begin(), a.axes.end(), name) - a.axes.begin());
  };
  for (size_t d = 0; d < left.size(); ++d) {
    int64_t known = 1;
    int unknown = -1;
    for (size_t k = 0; k < left[d].size(); ++k) {
      const std::string& name = left[d][k];
      COPPICE_CHECK(id_of(name) == static_cast<int64_t>(a.axes.size()), "rearrange '", pattern, "': axis '", name,
                    "' appears twice on the left side");
      a.axes.push_back(name);
      auto it = given.find(name);
      if (it != given.end()) {
        a.sizes.push_back(it->second);
        known = checked_mul(known, it->second, "rearrange");
      } else {
        COPPICE_CHECK(unknown < 0, "rearrange '", pattern, "': dim ", d, " splits into '", left[d][unknown], "' and '",
                      name, "', both of unknown size; give one in sizes");
        unknown = static_cast<int>(k);
        a.sizes.push_back(-1);
      }
    }
    const size_t first = a.axes.size() - left[d].size();
    if (unknown >= 0) {
      COPPICE_CHECK(known > 0 && shape[d] % known == 0, "rearrange '", pattern, "': dim ", d, " of size ", shape[d],
                    " does not split into parts of ", known);
      a.sizes[first + unknown] = shape[d] / known;
    } else {
      COPPICE_CHECK(known == shape[d], "rearrange '", pattern, "': dim ", d, " has size ", shape[d],
                    " but its axes' sizes multiply to ", known);
    }
  }
  a.input_axes = static_cast<int64_t>(a.axes.size());
  std::set<std::string> on_right;
  for (const Group& g : right) {
    std::vector<int64_t> ids;
    for (const std::string& name : g) {
      COPPICE_CHECK(on_right.insert(name).second, "rearrange '", pattern, "': axis '", name,
                    "' appears twice on the right side");
      int64_t id = id_of(name);
      if (id == static_cast<int64_t>(a.axes.size())) {
        auto it = given.find(name);
        COPPICE_CHECK(it != given.end(), "rearrange '", pattern, "': the new axis '", name,
                      "' needs its size in sizes");
        a.axes.push_back(name);
        a.sizes.push_back(it->second);
      }
      ids.push_back(id);
    }
    a.out_dims.push_back(std::move(ids));
  }
  for (int64_t i = 0; i < a.input_axes; ++i)
    COPPICE_CHECK(on_right.count(a.axes[i]) > 0, "rearrange '", pattern, "': axis '", a.axes[i],
                  "' of the left side is missing on the right (rearrange neither drops nor sums axes)");
  for (const auto& [name, size] : given)
    COPPICE_CHECK(id_of(name) < static_cast<int64_t>(a.axes.size()), "rearrange '", pattern, "': sizes names '", name,
                  "', which is not an axis of the pattern");
  return a;
}

Variable rearrange_dense(const Variable& x, const Arrangement& a) {
  Shape elementary(a.sizes.begin(), a.sizes.begin() + a.input_axes);
  Variable y = reshape(x, elementary);
  // The input axes in the order the right side lists them.
  std::vector<int64_t> order;
  for (const auto& dim : a.out_dims)
    for (int64_t id : dim)
      if (id < a.input_axes) order.push_back(id);
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == static_cast<int64_t>(i);
  if (!identity) y = permute(y, order);
  // New axes: size 1, then expanded.
  if (static_cast<int64_t>(a.axes.size()) > a.input_axes) {
    Shape with_ones, expanded;
    for (const auto& dim : a.out_dims) {
      for (int64_t id : dim) {
        with_ones.push_back(id < a.input_axes ? a.sizes[id] : 1);
        expanded.push_back(a.sizes[id]);
      }
    }
    y = expand(reshape(y, with_ones), expanded);
  }
  Shape out;
  for (const auto& dim : a.out_dims) {
    int64_t n = 1;
    for (int64_t id : dim) n = checked_mul(n, a.sizes[id], "rearrange");
    out.push_back(n);
  }
  return reshape(y, out);
}

}  // namespace

Variable rearrange(const Variable& x, std::string_view pattern, const std::map<std::string, int64_t>& sizes) {
  COPPICE_CHECK(x.defined(), "rearrange '", pattern, "': the operand is undefined");
  const Arrangement a = arrange(x.shape(), pattern, sizes);
  if (x.value().is_dense()) return rearrange_dense(x, a);
  EntryAxes axes{a.sizes, a.input_axes, a.out_dims};
  int64_t cols = 1;
  if (a.out_dims.size() == 2)
    for (int64_t id : a.out_dims[1]) cols = checked_mul(cols, a.sizes[id], "rearrange");
  const bool csr = a.out_dims.size() == 2 && cols <= std::numeric_limits<int32_t>::max();
  return remap_entries(x, axes, csr ? "csr" : "coo", "rearrange");
}

Tensor rearrange(const Tensor& x, std::string_view pattern, const std::map<std::string, int64_t>& sizes) {
  NoGradGuard no_grad;
  return rearrange(Variable(x), pattern, sizes).value();
}

}  // namespace coppice
