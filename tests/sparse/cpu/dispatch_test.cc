// Tests for how sparse operands reach the CPU kernels: every (op, formats)
// pair of the table in sparse/ops.h is registered on the CPU; the frontends
// (tensor/ops.h) route sparse operands to them without a dense fallback; a
// combination with no kernel takes the counted dense fallback (or throws
// when fallbacks are errors) and still gives the dense answer.
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/sparse/cpu/test_util.h"

namespace coppice {
namespace {

using sparse_test::near;
using sparse_test::random_dense;
using sparse_test::random_matrix;
using sparse_test::to_format_for_test;

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(false);
  }
  void TearDown() override {
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(false);
  }
};

bool registered(std::string_view op, std::vector<std::string_view> formats) {
  return Dispatcher::instance().find(op, DeviceType::kCpu, formats) != nullptr;
}

TEST_F(DispatchTest, EveryKernelOfTheTableIsRegistered) {
  int count = 0;
  for (const std::string& f : sparse_test::formats()) {
    for (std::string_view op : {"matmul", "linear", "mul", "add", "sub"}) {
      EXPECT_TRUE(registered(op, {f, "dense"})) << op << "(" << f << ", dense)";
      EXPECT_TRUE(registered(op, {"dense", f})) << op << "(dense, " << f << ")";
      count += 2;
    }
    for (std::string_view op : {"div", "pow"}) {
      EXPECT_TRUE(registered(op, {f, "dense"})) << op << "(" << f << ", dense)";
      ++count;
    }
    for (std::string_view op : {"neg", "abs", "sign", "relu", "sqrt", "tanh", "erf", "gelu", "sum", "transpose"}) {
      EXPECT_TRUE(registered(op, {f})) << op << "(" << f << ")";
      ++count;
    }
    EXPECT_TRUE(registered("sddmm", {"dense", "dense", f})) << "sddmm(dense, dense, " << f << ")";
    ++count;
    // f(0) != 0: left to the counted dense fallback.
    for (std::string_view op : {"exp", "sigmoid", "log", "clamp"}) EXPECT_FALSE(registered(op, {f})) << op;
  }
  for (const auto& pair : std::vector<std::vector<std::string_view>>{{"csr", "csr"}}) {
    EXPECT_TRUE(registered("matmul", pair));
    EXPECT_TRUE(registered("add", pair));
    EXPECT_TRUE(registered("sub", pair));
  }
  EXPECT_TRUE(registered("add", {"coo", "coo"}));
  EXPECT_TRUE(registered("sub", {"coo", "coo"}));
  // The dense kernels the fallback runs for the ops without a dense primitive.
  EXPECT_TRUE(registered("matmul", {"dense", "dense"}));
  EXPECT_TRUE(registered("linear", {"dense", "dense"}));
  EXPECT_TRUE(registered("sum", {"dense"}));
  EXPECT_EQ(count, 7 * (10 + 2 + 10 + 1));
}

TEST_F(DispatchTest, MatmulOfCsrAndDenseTakesNoFallback) {
  const Tensor w = to_format_for_test(random_matrix({12, 40}, 0.3, 1), "csr");
  const Tensor x = random_dense({40, 5}, 2).to(DType::kF32);
  const Tensor y = matmul(w, x);
  EXPECT_TRUE(near(y, matmul(to_dense(w), x), 1e-6, 1e-6));
  EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
}

TEST_F(DispatchTest, FrontendsRouteEveryFormatWithoutFallback) {
  uint64_t seed = 3;
  for (const std::string& f : sparse_test::formats()) {
    const Tensor a = to_format_for_test(random_matrix({12, 40}, 0.3, seed++), f);
    const Tensor x = random_dense({40, 5}, seed++).to(DType::kF32);
    const Tensor xl = random_dense({5, 12}, seed++).to(DType::kF32);
    const Tensor d = random_dense({12, 40}, seed++).to(DType::kF32);
    matmul(a, x);
    matmul(xl, a);
    linear(random_dense({5, 40}, seed++).to(DType::kF32), a);
    linear(a, random_dense({3, 40}, seed++).to(DType::kF32));
    mul(a, d);
    mul(d, a);
    mul(a, 2.0);
    div(a, 2.0);
    pow(a, 2.0);
    add(a, d);
    sub(d, a);
    relu(a);
    neg(a);
    abs(a);
    sum(a);
    sum(a, {0});
    const Tensor s1 = random_dense({12, 3}, seed++).to(DType::kF32);
    sddmm(s1, random_dense({3, 40}, seed++).to(DType::kF32), a);
    if (f != "nm") transpose(a);
    EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty()) << f;
  }
}

TEST_F(DispatchTest, UnregisteredCombinationsFallBackCounted) {
  const Tensor a = to_format_for_test(random_matrix({12, 40}, 0.3, 1), "csr");
  const Tensor b = to_format_for_test(random_matrix({40, 6}, 0.3, 2), "coo");
  Dispatcher& d = Dispatcher::instance();
  // exp(0) = 1: no sparse kernel; the dense answer, counted.
  Tensor e = exp(a);
  EXPECT_TRUE(e.is_dense());
  EXPECT_TRUE(near(e, exp(to_dense(a)), 1e-6, 1e-6));
  exp(a);
  // Two sparse operands of different formats.
  Tensor c = matmul(a, b);
  EXPECT_TRUE(c.is_dense());
  EXPECT_TRUE(near(c, matmul(to_dense(a), to_dense(b)), 1e-5, 1e-5));
  // clamp and comparisons reach the dense kernels too.
  EXPECT_TRUE(near(clamp(a, 0.0, 1.0), clamp(to_dense(a), 0.0, 1.0), 0, 0));
  EXPECT_TRUE(near(gt(a, 0.5), gt(to_dense(a), 0.5), 0, 0));
  EXPECT_EQ(d.fallback_counts(),
            (std::map<std::string, int64_t>{
                {"exp(csr)", 2}, {"matmul(csr, coo)", 1}, {"clamp(csr)", 1}, {"gt(csr, dense)", 1}}));
  // A switch makes them errors.
  d.set_fallback_is_error(true);
  EXPECT_THROWS_NAMING(exp(a), "exp: no kernel for exp(csr) on cpu, and dense fallbacks are errors");
  EXPECT_EQ(d.fallback_counts().at("exp(csr)"), 2);
}

TEST_F(DispatchTest, DenseFrontendsAreUnchanged) {
  const Tensor x = random_dense({4, 6}, 1).to(DType::kF32), w = random_dense({3, 6}, 2).to(DType::kF32);
  EXPECT_TRUE(near(linear(x, w), matmul(x, w.t()), 1e-6, 1e-6));
  EXPECT_TRUE(near(sum(x, {1}), sum(x.to(DType::kF64), {1}), 1e-6, 1e-6));
  EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
  EXPECT_THROWS_NAMING(matmul(x, w), "matmul: inner dimensions differ");
}

}  // namespace
}  // namespace coppice
