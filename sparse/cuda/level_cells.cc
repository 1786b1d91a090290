// The level family's CUDA cells (formats declared by their levels,
// sparse/levels/level_impl.h): the ops the family has on the CPU, for
// tensors on a GPU. A declaration that is a built-in format's runs on that
// format's CUDA kernels (levels::through_builtin_kernels); the BSR-of-2:4
// hybrid's linear runs on its tensor-core kernel (bsr_nm24.h). There are no
// generic CUDA kernels, so any other declaration's op fails, naming the op,
// the format and what would run it, rather than pass as a slow success.
#include <string>
#include <vector>

#include "sparse/cuda/bsr_nm24.h"
#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/pattern_cache.h"
#include "sparse/formats.h"
#include "sparse/levels/level_impl.h"
#include "sparse/levels/level_routes.h"
#include "sparse/ops.h"
#include "tensor/binary_ops.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"

namespace coppice::sparse_cuda {
namespace {

// The first operand of the level family among `in`.
const levels::LevelImpl& level_operand(const std::vector<Tensor>& in, std::string_view op) {
  for (const Tensor& t : in)
    if (t.defined() && t.impl()->kernel_family() == kLevelFamily) return levels::level_impl(t, op);
  fail(op, ": no operand of a format declared by its levels");
}

// Whether `level` is the BSR-of-2:4 hybrid that bsr_nm24_linear runs.
bool is_bsr_nm24(const levels::LevelImpl& level) {
  return levels::same_levels(level.declaration(), bsr_nm24_declaration()) &&
         (level.dtype() == DType::kBF16 || level.dtype() == DType::kF16);
}

[[noreturn]] void refuse(std::string_view op, const levels::LevelImpl& level) {
  fail(op, ": format '", level.format(), "' on ", level.device().to_string(), " has no CUDA kernel: its declaration ",
       levels::describe(level.declaration()), " is no built-in format's",
       is_bsr_nm24(level) ? ", and the BSR-of-2:4 kernel runs only its linear forward (linear(x, W))"
                          : str_cat(" and no specialized kernel takes it (the BSR-of-2:4 linear takes ",
                                    levels::describe(bsr_nm24_declaration()), " in bf16 or f16)"),
       "; the generic kernels run on the CPU (move the tensor there)");
}

// The cell's kernel when its level operand is no built-in format's.
Kernel refused(std::string op) {
  return
      [op](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> { refuse(op, level_operand(in, op)); };
}

// linear(x, W) with W the hybrid: its tensor-core kernel. The kernel's form
// of the pattern (block indices, metadata words) is made once per pattern;
// the values are W's own at every call (they change every step).
std::vector<Tensor> hybrid_linear(const std::vector<Tensor>& in, const Attrs&) {
  const levels::LevelImpl& w = levels::level_impl(in[1], op::kLinear);
  if (!is_bsr_nm24(w) || in[0].dim() != 2) refuse(op::kLinear, w);
  static PatternCache<BsrNm24Weight> forms;
  BsrNm24Weight form = forms.get(in[1], [&] {
    BsrNm24Weight built = bsr_nm24_weight(w.tensor(), in[0].device(), op::kLinear);
    built.values = Tensor();  // not kept: the pattern's form only
    return built;
  });
  form.values = w.tensor().values.reshape({form.metadata.size(0), kNm24StepCols / 2}).contiguous();
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  return {bsr_nm24_linear(in[0], form, bias)};
}

void reg(std::string_view op, const std::vector<std::vector<std::string>>& cells, const Kernel& own) {
  for (const std::vector<std::string>& formats : cells) {
    Dispatcher::instance().register_kernel(std::string(op), DeviceType::kCuda, formats,
                                           levels::through_builtin_kernels(std::string(op), own));
  }
}

[[maybe_unused]] const bool kRegistered = [] {
  const std::string levels(kLevelFamily);
  reg(op::kLinear, {{"dense", levels}}, hybrid_linear);
  reg(op::kLinear, {{levels, "dense"}}, refused(op::kLinear));
  reg(op::kMatmul, {{levels, "dense"}, {"dense", levels}}, refused(op::kMatmul));
  reg(op::kSddmm, {{"dense", "dense", levels}}, refused(op::kSddmm));
  reg(binary_ops::Mul::kName, {{levels, "dense"}, {"dense", levels}}, refused(binary_ops::Mul::kName));
  reg(binary_ops::Div::kName, {{levels, "dense"}}, refused(binary_ops::Div::kName));
  reg(binary_ops::Add::kName, {{levels, "dense"}, {"dense", levels}}, refused(binary_ops::Add::kName));
  reg(binary_ops::Sub::kName, {{levels, "dense"}, {"dense", levels}}, refused(binary_ops::Sub::kName));
  reg(op::kSum, {{levels}}, refused(op::kSum));
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
