// Tests for tensor/op_table.h: the table is well formed, every kernel the
// library registers (all of it is linked in: //:coppice) is a cell of a
// declared op within its arity and takes sparse formats only where the op
// says so, every op has its dense CPU cell or says why not, and the
// dispatcher's arity errors name the op and the counts.
#include "tensor/op_table.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparsifiers/fused_relu.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tensor/unary_ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

bool is_sparse_format(const std::string& f) { return f != "dense" && f != "none" && f != "*"; }

// The rows of COPPICE_OPS (not the elementwise tables' ops, nor users').
std::vector<const OpSpec*> table_rows() {
  std::vector<const OpSpec*> out;
#define COPPICE_OP_ROW_SPEC(constant, name, ...) out.push_back(find_op(op::constant));
  COPPICE_OPS(COPPICE_OP_ROW_SPEC)
#undef COPPICE_OP_ROW_SPEC
  return out;
}

TEST(OpTable, RowsAreWellFormed) {
  std::set<std::string> names;
  for (const OpSpec* spec : declared_ops()) {
    SCOPED_TRACE(spec->name);
    EXPECT_TRUE(names.insert(spec->name).second) << "declared twice";
    EXPECT_GE(spec->min_inputs, 1);
    EXPECT_GE(spec->max_inputs, spec->min_inputs);
    std::set<std::string> attrs;
    for (const AttrSpec& a : spec->attrs) EXPECT_TRUE(attrs.insert(a.name).second) << a.name;
    for (int i : spec->sparse_inputs) EXPECT_TRUE(i >= 0 && i < spec->max_inputs) << i;
    // kPatternOf names a sparse input; no other rule names one.
    EXPECT_EQ(spec->output == OpOutputRule::kPatternOf, spec->pattern_input >= 0);
    if (spec->output == OpOutputRule::kPatternOf) { EXPECT_TRUE(spec->takes_sparse(spec->pattern_input)); }
    for (const std::vector<std::string>& promised : spec->promised) {
      EXPECT_GE(static_cast<int>(promised.size()), spec->min_inputs);
      EXPECT_LE(static_cast<int>(promised.size()), spec->max_inputs);
      for (size_t i = 0; i < promised.size(); ++i) {
        if (is_sparse_format(promised[i])) { EXPECT_TRUE(spec->takes_sparse(static_cast<int>(i))) << promised[i]; }
      }
    }
  }
  const std::vector<const OpSpec*> rows = table_rows();
  for (const OpSpec* spec : rows) EXPECT_NE(spec, nullptr);
  EXPECT_EQ(std::string(op::kMatmul), "matmul");
  EXPECT_EQ(find_op(op::kLinear)->arity(), "2 to 3 inputs");
  EXPECT_EQ(find_op(op::kSum)->arity(), "1 input");
  EXPECT_EQ(find_op("no_such_op"), nullptr);
  // The elementwise tables' ops are declared too.
  EXPECT_EQ(find_op("gelu")->max_inputs, 1);
  EXPECT_EQ(find_op("add")->max_inputs, 2);
  EXPECT_EQ(find_op("clamp")->attrs.size(), 2u);
}

TEST(OpTable, EveryRegisteredCellIsOfADeclaredOpWithinItsArity) {
  const std::vector<Dispatcher::Cell> cells = Dispatcher::instance().cells();
  int sparse_cells = 0;
  for (const Dispatcher::Cell& cell : cells) {
    const OpSpec* spec = find_op(cell.op);
    ASSERT_NE(spec, nullptr) << cell.op;
    const int n = static_cast<int>(cell.formats.size());
    EXPECT_TRUE(n >= spec->min_inputs && n <= spec->max_inputs) << cell.op << " with " << n << " inputs";
    bool sparse = false;
    for (int i = 0; i < n; ++i) {
      if (!is_sparse_format(cell.formats[i])) continue;
      sparse = true;
      EXPECT_TRUE(spec->takes_sparse(i)) << cell.op << ": input " << i << " registered as " << cell.formats[i]
                                         << ", but the table says it takes no sparse format there";
    }
    sparse_cells += sparse;
  }
  std::printf("op table: %zu declared ops, %zu registered cells (%d with a sparse operand)\n", declared_ops().size(),
              cells.size(), sparse_cells);
}

// An op without a dense CPU kernel says why (a fused form only, a device's
// twin, ...), and what it says stays true: it has none.
TEST(OpTable, EveryOpHasADenseCpuCellOrSaysWhyNot) {
  // relu_to_csr's CPU kernel sits beside its caller (sparsifiers/fused_relu.cc,
  // not an alwayslink library): a reference to it links the registration in.
  static auto* volatile linked = &fused_relu;
  ASSERT_NE(linked, nullptr);
  std::set<std::string> dense_cpu;
  for (const Dispatcher::Cell& cell : Dispatcher::instance().cells()) {
    if (cell.device != DeviceType::kCpu) continue;
    bool dense = true;
    for (const std::string& f : cell.formats) dense = dense && !is_sparse_format(f);
    if (dense) dense_cpu.insert(cell.op);
  }
  for (const OpSpec* spec : declared_ops()) {
    SCOPED_TRACE(spec->name);
    if (spec->no_dense_cpu.empty()) {
      EXPECT_EQ(dense_cpu.count(spec->name), 1u) << "has no dense CPU cell and does not say why";
    } else {
      EXPECT_EQ(dense_cpu.count(spec->name), 0u)
          << "says it has no dense CPU cell (" << spec->no_dense_cpu << ") but has one";
    }
  }
}

TEST(OpTable, RegistrationsOutsideTheTableOrItsArityAreErrorsNamingTheOp) {
  Dispatcher& d = Dispatcher::instance();
  const Kernel none = [](const std::vector<Tensor>&, const Attrs&) { return std::vector<Tensor>{}; };
  EXPECT_ERROR_NAMING(d.register_kernel("no_such_op", DeviceType::kCpu, {"dense"}, none),
                      "register_kernel: op 'no_such_op' is not declared (tensor/op_table.h");
  EXPECT_ERROR_NAMING(d.register_kernel(op::kMatmul, DeviceType::kCpu, {"dense"}, none),
                      "register_kernel: op 'matmul' takes 2 inputs, not 1 (dense)");
  EXPECT_ERROR_NAMING(d.register_kernel(op::kLinear, DeviceType::kCpu, {"dense", "dense", "dense", "dense"}, none),
                      "register_kernel: op 'linear' takes 2 to 3 inputs, not 4");
  EXPECT_ERROR_NAMING(d.register_kernel("gelu", DeviceType::kCpu, {"dense", "dense"}, none),
                      "register_kernel: op 'gelu' takes 1 input, not 2");
  EXPECT_ERROR_NAMING(declare_op(OpSpec(op::kMatmul).inputs(2)), "declare_op: op 'matmul' is already declared");
  EXPECT_ERROR_NAMING(declare_op(OpSpec("test_nothing")),
                      "declare_op: op 'test_nothing' takes 0 inputs; declare at least one input");
}

// A registrar runs at static initialization, where an exception ends the
// program: it says why on stderr first (simulated here in a noexcept frame).
TEST(OpTableDeathTest, AnUndeclaredOpStopsStaticRegistrationNamingIt) {
  auto register_undeclared = []() noexcept {
    KernelRegistrar r("no_such_op", DeviceType::kCpu, {"dense"},
                      [](const std::vector<Tensor>&, const Attrs&) { return std::vector<Tensor>{}; });
  };
  EXPECT_DEATH(register_undeclared(), "coppice: register_kernel: op 'no_such_op' is not declared");
}

TEST(OpTable, DispatchesWithAWrongInputCountAreErrorsNamingOpAndCounts) {
  const Tensor x = ones({2, 2});
  EXPECT_ERROR_NAMING(dispatch(op::kMatmul, {x}), "matmul: takes 2 inputs, got 1");
  EXPECT_ERROR_NAMING(dispatch(op::kLinear, {x, x, x, x}), "linear: takes 2 to 3 inputs, got 4");
  EXPECT_ERROR_NAMING(dispatch(op::kSoftmax, {x, x}), "softmax: takes 1 input, got 2");
  EXPECT_ERROR_NAMING(dispatch("no_such_op", {x}), "'no_such_op' is not a declared op");
  EXPECT_EQ(dispatch(op::kMatmul, {x, x})[0].to_vector<double>(), (std::vector<double>(4, 2.0)));
}

// The attributes of a dispatch are the op's declared ones, of their types;
// an int passes for a double (Attrs::get_double converts it).
TEST(OpTable, DispatchesWithAnUndeclaredOrMistypedAttributeAreErrorsNamingIt) {
  const Tensor x = ones({2, 3});
  EXPECT_ERROR_NAMING(dispatch(op::kSoftmax, {x}, Attrs().set("dim", int64_t{1}).set("axis", int64_t{1})),
                      "softmax: attribute 'axis' is not declared (tensor/op_table.h declares dim)");
  EXPECT_ERROR_NAMING(dispatch(op::kMatmul, {x, x.t()}, Attrs().set("dim", int64_t{1})),
                      "matmul: attribute 'dim' is not declared (tensor/op_table.h declares none)");
  EXPECT_ERROR_NAMING(dispatch(op::kTopk, {x}, Attrs().set("k", 1.5).set("largest", true)),
                      "topk: attribute 'k' must be an int");
  EXPECT_ERROR_NAMING(dispatch(unary_ops::Clamp::kName, {x}, Attrs().set("min", std::string("0"))),
                      "clamp: attribute 'min' must be a double");
  const Tensor clamped =
      dispatch(unary_ops::Clamp::kName, {x}, Attrs().set("min", int64_t{0}).set("max", int64_t{0}))[0];
  EXPECT_EQ(clamped.to_vector<double>(), std::vector<double>(6, 0.0));
}

}  // namespace
}  // namespace coppice
