// The declarations behind find_op: COPPICE_OPS' rows built once, the
// elementwise tables' ops declared from their structs, and the users' ops.
#include "tensor/op_table.h"

#include <algorithm>
#include <memory>

#include "tensor/binary_ops.h"
#include "tensor/error.h"
#include "tensor/unary_ops.h"

namespace coppice {

bool OpSpec::takes_sparse(int input) const {
  return std::find(sparse_inputs.begin(), sparse_inputs.end(), input) != sparse_inputs.end();
}

std::string arity_text(size_t min_inputs, size_t max_inputs) {
  if (min_inputs != max_inputs) return std::to_string(min_inputs) + " to " + std::to_string(max_inputs) + " inputs";
  return std::to_string(min_inputs) + (min_inputs == 1 ? " input" : " inputs");
}

std::string OpSpec::arity() const {
  return arity_text(static_cast<size_t>(std::max(min_inputs, 0)), static_cast<size_t>(std::max(max_inputs, 0)));
}

namespace op_table_terms {

// The short names the rows of COPPICE_OPS use.
constexpr AttrType kInt = AttrType::kInt, kDouble = AttrType::kDouble, kBool = AttrType::kBool,
                   kString = AttrType::kString, kInts = AttrType::kInts;
constexpr OpOutputRule kPatternOf = OpOutputRule::kPatternOf, kTransposeOf = OpOutputRule::kTransposeOf,
                       kDenseOrCsr = OpOutputRule::kDenseOrCsr, kInPlace = OpOutputRule::kInPlace;

// Why an op has no dense CPU cell.
constexpr const char* kFusedOnly =
    "a sparse weight's fused kernel only: without one the frontend composes the product and the elementwise op";
constexpr const char* kFusedOrDeclined =
    "a sparse weight's fused kernel only, which may decline (an undefined output): the caller then adds itself";
constexpr const char* kHook =
    "a hook for a fused kernel (none built in): without one the frontend composes it from other ops";
constexpr const char* kCudaFused = "CUDA's fused kernel: on the CPU the frontend composes it from other ops";
constexpr const char* kSparsePattern = "samples at a sparse pattern's stored entries: a dense pattern is a matmul";
constexpr const char* kDeviceTwin = "a device's twin of a CPU function that runs without the dispatcher";
constexpr const char* kSgdArgs = "optim/sgd_step_math.h (SgdStepArgs::for_each_field)";
constexpr const char* kAdamArgs = "optim/adam_step_math.h (AdamStepArgs::for_each_field)";

std::vector<OpSpec> table_rows() {
#define COPPICE_OP_ROW(constant, name, ...) OpSpec(op::constant) __VA_ARGS__,
  return {COPPICE_OPS(COPPICE_OP_ROW)};
#undef COPPICE_OP_ROW
}

}  // namespace op_table_terms

namespace {

// The elementwise tables' ops, as declarations: the tables hold their names
// and math; the dispatcher needs only their arity.
void add_elementwise(std::vector<OpSpec>& out) {
  unary_ops::for_each([&](auto op) {
    out.push_back(OpSpec(decltype(op)::kName).inputs(1).sparse({0}).outputs(OpOutputRule::kElementwise));
  });
  out.push_back(OpSpec(unary_ops::Clamp::kName)
                    .inputs(1)
                    .attr("min", AttrType::kDouble)
                    .attr("max", AttrType::kDouble)
                    .sparse({0})
                    .outputs(OpOutputRule::kElementwise));
  binary_ops::for_each([&](auto op) {
    out.push_back(OpSpec(decltype(op)::kName).inputs(2).sparse({0, 1}).outputs(OpOutputRule::kElementwise));
  });
}

// Held in unique_ptrs so that find_op's pointers survive later declarations.
std::vector<std::unique_ptr<OpSpec>>& declarations() {
  static auto* all = [] {
    std::vector<OpSpec> specs = op_table_terms::table_rows();
    add_elementwise(specs);
    auto* out = new std::vector<std::unique_ptr<OpSpec>>();
    for (OpSpec& s : specs) out->push_back(std::make_unique<OpSpec>(std::move(s)));
    return out;
  }();
  return *all;
}

}  // namespace

const OpSpec* find_op(std::string_view name) {
  for (const auto& s : declarations()) {
    if (s->name == name) return s.get();
  }
  return nullptr;
}

std::vector<const OpSpec*> declared_ops() {
  std::vector<const OpSpec*> out;
  for (const auto& s : declarations()) out.push_back(s.get());
  return out;
}

void declare_op(OpSpec spec) {
  COPPICE_CHECK(!spec.name.empty(), "declare_op: empty op name");
  COPPICE_CHECK(find_op(spec.name) == nullptr, "declare_op: op '", spec.name, "' is already declared");
  COPPICE_CHECK(spec.min_inputs >= 1 && spec.max_inputs >= spec.min_inputs, "declare_op: op '", spec.name, "' takes ",
                spec.arity(), "; declare at least one input");
  declarations().push_back(std::make_unique<OpSpec>(std::move(spec)));
}

}  // namespace coppice
