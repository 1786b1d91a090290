#include "sparse/levels/level_routes.h"

#include <optional>
#include <utility>
#include <vector>

#include "sparse/formats.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparse/sparse_impl.h"

namespace coppice::levels {

Kernel through_builtin_kernels(std::string op, Kernel own) {
  return [op = std::move(op), own = std::move(own)](const std::vector<Tensor>& in, const Attrs& attrs) {
    std::vector<Tensor> builtin = in;
    std::optional<size_t> pattern;  // a level operand, whose pattern a result may have
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() || in[i].impl()->kernel_family() != kLevelFamily) continue;
      const std::optional<Tensor> as_builtin = level_impl(in[i], op).as_builtin();
      if (!as_builtin) return own(in, attrs);
      builtin[i] = *as_builtin;
      pattern = i;
    }
    if (!pattern) return own(in, attrs);
    std::vector<Tensor> out = dispatch(op, builtin, attrs);
    const Tensor& level = in[*pattern];
    for (Tensor& o : out) {
      if (!o.defined() || !o.is_sparse() || o.format() != builtin[*pattern].format()) continue;
      o = with_values(level, level_values_of(o));
    }
    return out;
  };
}

}  // namespace coppice::levels
