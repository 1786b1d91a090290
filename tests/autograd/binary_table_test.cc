// Every differentiable op of tensor/binary_ops.h (COPPICE_DIFFERENTIABLE_BINARY_OPS),
// swept from the table (so an op added there is tested here without a line of
// its own): its float64 gradcheck on equal and broadcast shapes, with either
// side alone requiring grad (the wrapper keeps only what the needed side's
// gradient reads), its scalar forms as the table's kScalars says, its graph
// node's name, and the sparse operands of the ops with a sparse autograd path
// on every built-in sparse format, either side.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "autograd/function.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "tensor/binary_ops.h"
#include "tensor/ops.h"
#include "tests/autograd/test_util.h"

namespace coppice {
namespace {

using binary_ops::Scalars;
using testing::constant;
using testing::param;
using testing::randn64;
using testing::randn_away;
using testing::uniform64;
using V = std::vector<Variable>;

// The table's Variable functions by name, through the generated overloads
// (and the scalar forms, with a number on either side).
template <typename Op, typename A, typename B>
Variable apply(const A& a, const B& b) {
  std::vector<Variable> out;
#define COPPICE_PICK(fn, Name) \
  if constexpr (std::is_same_v<Op, binary_ops::Name>) out.push_back(coppice::fn(a, b));
  COPPICE_DIFFERENTIABLE_BINARY_OPS(COPPICE_PICK)
#undef COPPICE_PICK
  return out.at(0);
}

// Operands inside every op's smooth domain: pow's base positive, everything
// else away from 0 (div's denominator); maximum's and minimum's operands
// almost never tie in random normals.
Tensor first_operand(std::string_view op, const Shape& shape) {
  return op == "pow" ? uniform64(shape, 0.3, 3.0) : randn_away(shape, 0.0, 0.2);
}
Tensor second_operand(const Shape& shape) { return randn_away(shape, 0.0, 0.2); }

struct Shapes {
  Shape a, b;
};
// Same shapes, trailing broadcast, both sides broadcasting, a 0-d operand.
const std::vector<Shapes> kShapes = {{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3, 1, 4}, {5, 1}},
                                     {{2, 1}, {1, 3}}, {{}, {2, 2}},  {{2, 2}, {}}};

TEST(BinaryTableTest, EveryDifferentiableOpGradchecksInFloat64WithBroadcasting) {
  binary_ops::for_each_differentiable([](auto op) {
    using Op = decltype(op);
    for (const Shapes& s : kShapes) {
      SCOPED_TRACE(std::string(Op::kName) + " " + shape_to_string(s.a) + " with " + shape_to_string(s.b));
      const Tensor at = first_operand(Op::kName, s.a), bt = second_operand(s.b);
      auto f = [](const V& v) { return apply<Op>(v[0], v[1]); };
      EXPECT_GRADCHECK(f, {param(at, "a"), param(bt, "b")});
      EXPECT_GRADCHECK(f, {param(at, "a"), constant(bt)});
      EXPECT_GRADCHECK(f, {constant(at), param(bt, "b")});
    }
  });
}

TEST(BinaryTableTest, OneSideAloneGetsItsGradient) {
  // What the wrapper keeps alive depends on which side requires grad; the
  // gradient of the side that does equals the one taken with both.
  binary_ops::for_each_differentiable([](auto op) {
    using Op = decltype(op);
    SCOPED_TRACE(Op::kName);
    const Tensor at = first_operand(Op::kName, {3, 4}), bt = second_operand({4});
    Variable a = param(at), b = param(bt);
    sum(apply<Op>(a, b)).backward();
    Variable a_only = param(at), b_only = param(bt);
    sum(apply<Op>(a_only, constant(bt))).backward();
    sum(apply<Op>(constant(at), b_only)).backward();
    EXPECT_EQ(a_only.grad().to_vector<double>(), a.grad().to_vector<double>());
    EXPECT_EQ(b_only.grad().to_vector<double>(), b.grad().to_vector<double>());
  });
}

TEST(BinaryTableTest, NodesAreNamedAfterTheOp) {
  binary_ops::for_each_differentiable([](auto op) {
    using Op = decltype(op);
    std::string want = Op::kName;
    want[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(want[0])));
    want += "Backward";
    const Variable y = apply<Op>(param(first_operand(Op::kName, {2})), param(second_operand({2})));
    ASSERT_NE(y.grad_fn(), nullptr) << Op::kName;
    EXPECT_EQ(y.grad_fn()->name(), want);
  });
}

TEST(BinaryTableTest, ScalarFormsAsTheTableSays) {
  binary_ops::for_each_differentiable([](auto op) {
    using Op = decltype(op);
    SCOPED_TRACE(Op::kName);
    Variable x = param(first_operand(Op::kName, {2, 3}), "x");
    if constexpr (Op::kScalars != Scalars::kNone) {
      EXPECT_GRADCHECK([](const V& v) { return apply<Op>(v[0], 1.7); }, {x});
      const Tensor want = apply<Op>(Variable(x.value()), Variable(scalar_tensor(1.7, x.value().options()))).value();
      EXPECT_EQ(apply<Op>(x, 1.7).value().template to_vector<double>(), want.template to_vector<double>());
    }
    if constexpr (Op::kScalars == Scalars::kEitherSide) {
      Variable y = param(second_operand({2, 3}), "y");
      EXPECT_GRADCHECK([](const V& v) { return apply<Op>(1.7, v[0]); }, {y});
      const Tensor want = apply<Op>(Variable(scalar_tensor(1.7, y.value().options())), Variable(y.value())).value();
      EXPECT_EQ(apply<Op>(1.7, y).value().template to_vector<double>(), want.template to_vector<double>());
    }
  });
}

// A random f64 sparse matrix of `format` (about half the entries stored; BSR
// in 2x2 blocks), every stored value at least 0.2 away from 0.
Tensor random_sparse(const Shape& shape, const std::string& format) {
  Tensor mask = lt(rand(shape, DType::kF64, testing::test_gen()), 0.5);
  FormatOptions options = is_block_format(format) ? FormatOptions::block(2) : FormatOptions{};
  Tensor s = sparse_from_mask(randn64(shape), mask, format, options);
  return with_values(s, randn_away(values(s).shape(), 0.0, 0.2));
}

TEST(BinaryTableTest, SparseOperandsOfTheOpsWithASparsePath) {
  int swept = 0;
  binary_ops::for_each_differentiable([&](auto op) {
    using Op = decltype(op);
    if constexpr (Op::kSparseAutograd) {
      ++swept;
      for (const std::string format : {"csr", "coo", "bsr"}) {
        SCOPED_TRACE(std::string(Op::kName) + " on " + format);
        Variable s = param(random_sparse({4, 6}, format), "s");
        for (const Shape& dense_shape : {Shape{4, 6}, Shape{6}, Shape{1, 6}}) {
          Variable d = param(randn64(dense_shape), "d");
          EXPECT_GRADCHECK([](const V& v) { return apply<Op>(v[0], v[1]); }, {s, d});
          EXPECT_GRADCHECK([](const V& v) { return apply<Op>(v[1], v[0]); }, {s, d});
        }
        // The sparse operand's gradient keeps its format.
        Variable d = param(randn64({4, 6}));
        sum(to_dense(apply<Op>(s, d))).backward();
        EXPECT_EQ(s.grad().format(), s.value().format());
      }
    }
  });
  EXPECT_EQ(swept, 2);  // add and mul
}

}  // namespace
}  // namespace coppice
