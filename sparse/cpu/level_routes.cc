#include "sparse/cpu/level_routes.h"

#include <optional>
#include <utility>
#include <vector>

#include "sparse/formats.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparse/sparse_impl.h"

namespace coppice::sparse_cpu {

Kernel through_builtin_kernels(std::string op, Kernel generic) {
  return [op = std::move(op), generic = std::move(generic)](const std::vector<Tensor>& in, const Attrs& attrs) {
    std::vector<Tensor> builtin = in;
    std::optional<size_t> pattern;  // a level operand, whose pattern a result may have
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() || in[i].impl()->kernel_family() != kLevelFamily) continue;
      const std::optional<Tensor> as_builtin = levels::level_impl(in[i], op).as_builtin();
      if (!as_builtin) return generic(in, attrs);
      builtin[i] = *as_builtin;
      pattern = i;
    }
    if (!pattern) return generic(in, attrs);
    std::vector<Tensor> out = dispatch(op, builtin, attrs);
    const Tensor& level = in[*pattern];
    for (Tensor& o : out) {
      if (!o.defined() || !o.is_sparse() || o.format() != builtin[*pattern].format()) continue;
      // Blocked-ELL's values in level order (builtin_levels.h); the others' are already.
      o = with_values(level,
                      o.format() == "blocked_ell" ? levels::level_tensor_of(o, op).values : values(o).reshape({-1}));
    }
    return out;
  };
}

}  // namespace coppice::sparse_cpu
