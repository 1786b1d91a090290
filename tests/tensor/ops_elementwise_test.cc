// Tests for tensor/ops_elementwise.cc: broadcasting, promotion, scalars,
// unary math, clamp, where, operators and the errors for misuse.
#include <cmath>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// x[i] = base + i * step, as f64 then converted.
Tensor seq(const Shape& shape, double base, double step, DType dtype = DType::kF32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<double>(i) * step;
  return from_vector<double>(v, shape, dtype);
}

TEST(Elementwise, AddBroadcastsLikeNumPy) {
  Tensor a = seq({2, 3}, 1, 1);  // [[1,2,3],[4,5,6]]
  Tensor b = seq({3}, 10, 10);   // [10,20,30]
  EXPECT_EQ(vals(add(a, b)), (std::vector<double>{11, 22, 33, 14, 25, 36}));

  Tensor col = seq({2, 1}, 100, 100);  // [[100],[200]]
  Tensor row = seq({1, 3}, 1, 1);      // [[1,2,3]]
  Tensor out = add(col, row);
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(vals(out), (std::vector<double>{101, 102, 103, 201, 202, 203}));

  Tensor s = scalar_tensor(0.5);
  EXPECT_EQ(vals(add(a, s)), (std::vector<double>{1.5, 2.5, 3.5, 4.5, 5.5, 6.5}));
  EXPECT_EQ(add(s, s).dim(), 0);
}

TEST(Elementwise, AllBinaryOpsAgainstDoubleLoops) {
  Tensor a = seq({3, 4}, -2.5, 0.5, DType::kF64);
  Tensor b = seq({4}, 0.75, 0.5, DType::kF64);
  std::vector<double> va = vals(a), vb = vals(b);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  std::vector<Case> cases = {
      {"add", [](auto& x, auto& y) { return add(x, y); }, [](double x, double y) { return x + y; }},
      {"sub", [](auto& x, auto& y) { return sub(x, y); }, [](double x, double y) { return x - y; }},
      {"mul", [](auto& x, auto& y) { return mul(x, y); }, [](double x, double y) { return x * y; }},
      {"div", [](auto& x, auto& y) { return div(x, y); }, [](double x, double y) { return x / y; }},
      {"pow", [](auto& x, auto& y) { return pow(abs(x), y); },
       [](double x, double y) { return std::pow(std::abs(x), y); }},
      {"maximum", [](auto& x, auto& y) { return maximum(x, y); }, [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](auto& x, auto& y) { return minimum(x, y); }, [](double x, double y) { return std::min(x, y); }},
      {"eq", [](auto& x, auto& y) { return eq(x, y); }, [](double x, double y) { return double(x == y); }},
      {"ne", [](auto& x, auto& y) { return ne(x, y); }, [](double x, double y) { return double(x != y); }},
      {"lt", [](auto& x, auto& y) { return lt(x, y); }, [](double x, double y) { return double(x < y); }},
      {"le", [](auto& x, auto& y) { return le(x, y); }, [](double x, double y) { return double(x <= y); }},
      {"gt", [](auto& x, auto& y) { return gt(x, y); }, [](double x, double y) { return double(x > y); }},
      {"ge", [](auto& x, auto& y) { return ge(x, y); }, [](double x, double y) { return double(x >= y); }},
  };
  for (const Case& c : cases) {
    Tensor out = c.op(a, b);
    EXPECT_EQ(out.shape(), (Shape{3, 4})) << c.name;
    std::vector<double> v = vals(out);
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_NEAR(v[i * 4 + j], c.ref(va[i * 4 + j], vb[j]), 1e-12) << c.name << " at " << i << "," << j;
      }
    }
  }
  EXPECT_EQ(eq(a, b).dtype(), DType::kBool);
  EXPECT_EQ(mul(a, b).dtype(), DType::kF64);
}

TEST(Elementwise, NonContiguousOperands) {
  Tensor base = seq({3, 4}, 0, 1);  // row-major 0..11
  Tensor t = base.t();              // [4, 3], strides [1, 4]
  ASSERT_FALSE(t.is_contiguous());
  Tensor out = add(t, seq({4, 3}, 0, 100));
  std::vector<double> v = vals(out);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(v[i * 3 + j], (j * 4 + i) + 100.0 * (i * 3 + j));
  }
  Tensor stepped = base.slice(1, 0, 4, 2);  // columns 0 and 2
  EXPECT_EQ(vals(mul(stepped, 2.0)), (std::vector<double>{0, 4, 8, 12, 16, 20}));
  Tensor expanded = seq({3, 1}, 1, 1).expand({3, 4});
  EXPECT_EQ(vals(sub(expanded, base)), (std::vector<double>{1, 0, -1, -2, -2, -3, -4, -5, -5, -6, -7, -8}));
  EXPECT_EQ(vals(exp(t.select(1, 0))), vals(exp(from_vector<float>({0, 1, 2, 3}))));
}

TEST(Elementwise, DtypePromotion) {
  Tensor i32 = from_vector<int32_t>({1, 2, 3});
  Tensor i64 = from_vector<int64_t>({10, 20, 30});
  Tensor f32 = from_vector<float>({0.5f, 0.25f, 0.125f});
  Tensor f64 = from_vector<double>({1, 1, 1});
  Tensor bf = from_vector<float>({1, 2, 3}, {}, DType::kBF16);
  Tensor hf = from_vector<float>({1, 2, 3}, {}, DType::kF16);
  Tensor u8 = from_vector<uint8_t>({1, 2, 255});
  Tensor bl = from_vector<bool>({true, false, true});

  EXPECT_EQ(add(i32, f32).dtype(), DType::kF32);
  EXPECT_EQ(vals(add(i32, f32)), (std::vector<double>{1.5, 2.25, 3.125}));
  EXPECT_EQ(add(i32, i64).dtype(), DType::kI64);
  EXPECT_EQ(vals(add(i32, i64)), (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(add(f32, f64).dtype(), DType::kF64);
  EXPECT_EQ(add(bf, hf).dtype(), DType::kF32);
  EXPECT_EQ(add(bf, bf).dtype(), DType::kBF16);
  EXPECT_EQ(add(bf, f32).dtype(), DType::kF32);
  EXPECT_EQ(add(i64, hf).dtype(), DType::kF16);
  EXPECT_EQ(add(u8, bl).dtype(), DType::kU8);
  EXPECT_EQ(vals(add(u8, bl)), (std::vector<double>{2, 2, 0}));  // 255 + 1 wraps in u8
  EXPECT_EQ(mul(bl, bl).dtype(), DType::kBool);
  EXPECT_EQ(lt(i64, f32).dtype(), DType::kBool);
  EXPECT_EQ(vals(gt(i32, hf)), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(vals(ge(i32, hf)), (std::vector<double>{1, 1, 1}));

  // True division: integers divide as floats.
  Tensor q = div(from_vector<int64_t>({7, -7, 1}), from_vector<int64_t>({2, 2, 0}));
  EXPECT_EQ(q.dtype(), DType::kF32);
  EXPECT_EQ(vals(q), (std::vector<double>{3.5, -3.5, INFINITY}));
  Tensor p = pow(from_vector<int32_t>({2, 3}), from_vector<int32_t>({3, 2}));
  EXPECT_EQ(p.dtype(), DType::kF32);
  EXPECT_EQ(vals(p), (std::vector<double>{8, 9}));
}

TEST(Elementwise, ScalarOverloads) {
  Tensor i = from_vector<int64_t>({1, 2, 3});
  EXPECT_EQ(add(i, 2.0).dtype(), DType::kI64);
  EXPECT_EQ(vals(add(i, 2.0)), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(add(i, 0.5).dtype(), DType::kF32);  // integer tensor, non-integral scalar
  EXPECT_EQ(vals(add(i, 0.5)), (std::vector<double>{1.5, 2.5, 3.5}));
  EXPECT_EQ(vals(div(i, 2.0)), (std::vector<double>{0.5, 1, 1.5}));
  EXPECT_EQ(vals(pow(i, 2.0)), (std::vector<double>{1, 4, 9}));

  Tensor i32 = from_vector<int32_t>({1, 2});
  EXPECT_EQ(mul(i32, 3.0).dtype(), DType::kI32);
  EXPECT_EQ(add(i32, 1e10).dtype(), DType::kI64);  // the scalar does not fit in i32
  EXPECT_EQ(vals(add(i32, 1e10)), (std::vector<double>{1e10 + 1, 1e10 + 2}));
  Tensor u8 = from_vector<uint8_t>({5});
  EXPECT_EQ(add(u8, -10.0).dtype(), DType::kI64);  // -10 does not fit in u8
  EXPECT_EQ(vals(add(u8, -10.0)), (std::vector<double>{-5}));
  EXPECT_EQ(vals(sub(u8, 10.0)), (std::vector<double>{251}));  // 10 fits: u8 arithmetic wraps

  Tensor h = from_vector<float>({1, 2}, {}, DType::kF16);
  EXPECT_EQ(mul(h, 3.0).dtype(), DType::kF16);
  EXPECT_EQ(vals(mul(h, 3.0)), (std::vector<double>{3, 6}));

  Tensor b = from_vector<bool>({true, false});
  EXPECT_EQ(vals(eq(b, 1.0)), (std::vector<double>{1, 0}));
  EXPECT_EQ(vals(eq(b, 2.0)), (std::vector<double>{0, 0}));  // 2 is not true

  Tensor f = from_vector<float>({-1, 0, 2});
  EXPECT_EQ(vals(eq(f, 0.0)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(vals(ne(f, 0.0)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(vals(lt(f, 0.0)), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(vals(le(f, 0.0)), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(vals(gt(f, 0.0)), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(vals(ge(f, 0.0)), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(vals(lt(i, 1.5)), (std::vector<double>{1, 0, 0}));
}

TEST(Elementwise, SixteenBitRounding) {
  // 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: ties to even gives 1.
  Tensor one = full({1}, 1.0, DType::kBF16);
  EXPECT_EQ(add(one, full({1}, std::ldexp(1.0, -8), DType::kBF16)).item(), 1.0);
  EXPECT_EQ(add(one, full({1}, 3 * std::ldexp(1.0, -8), DType::kBF16)).item(), 1.0 + std::ldexp(1.0, -6));
  // f16 has 10 mantissa bits: 1 + 2^-11 rounds to 1, 1 + 2^-10 is exact.
  Tensor h = full({1}, 1.0, DType::kF16);
  EXPECT_EQ(add(h, std::ldexp(1.0, -11)).item(), 1.0);
  EXPECT_EQ(add(h, std::ldexp(1.0, -10)).item(), 1.0 + std::ldexp(1.0, -10));
  // f16 overflows to inf above 65504.
  EXPECT_TRUE(std::isinf(mul(full({1}, 60000, DType::kF16), 2.0).item()));
  // bf16 keeps f32's range.
  EXPECT_EQ(mul(full({1}, 1e30, DType::kBF16), 1e5).dtype(), DType::kBF16);
  EXPECT_NEAR(mul(full({1}, 1e30, DType::kBF16), 1e5).item(), 1e35, 1e33);
}

TEST(Elementwise, UnaryAgainstStd) {
  Tensor x = seq({7}, -1.5, 0.5, DType::kF64);  // -1.5 .. 1.5
  std::vector<double> vx = vals(x);
  Tensor pos = seq({5}, 0.25, 0.75, DType::kF64);
  std::vector<double> vp = vals(pos);
  auto check = [](const Tensor& out, const std::vector<double>& in, double (*ref)(double), const char* name) {
    std::vector<double> v = out.to_vector<double>();
    ASSERT_EQ(v.size(), in.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], ref(in[i]), 1e-12) << name << "(" << in[i] << ")";
  };
  check(
      neg(x), vx, [](double v) { return -v; }, "neg");
  check(
      abs(x), vx, [](double v) { return std::abs(v); }, "abs");
  check(
      sign(x), vx, [](double v) { return double((v > 0) - (v < 0)); }, "sign");
  check(
      exp(x), vx, [](double v) { return std::exp(v); }, "exp");
  check(
      log(pos), vp, [](double v) { return std::log(v); }, "log");
  check(
      sqrt(pos), vp, [](double v) { return std::sqrt(v); }, "sqrt");
  check(
      rsqrt(pos), vp, [](double v) { return 1 / std::sqrt(v); }, "rsqrt");
  check(
      relu(x), vx, [](double v) { return v > 0 ? v : 0.0; }, "relu");
  check(
      gelu(x), vx, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, "gelu");
  check(
      sigmoid(x), vx, [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid");
  check(
      tanh(x), vx, [](double v) { return std::tanh(v); }, "tanh");
  check(
      erf(x), vx, [](double v) { return std::erf(v); }, "erf");

  // f32 and bf16 follow the same math within their precision.
  Tensor xf = x.to(DType::kF32), xb = x.to(DType::kBF16);
  EXPECT_LT(max_abs_diff(gelu(xf), gelu(x)), 1e-6);
  EXPECT_EQ(gelu(xb).dtype(), DType::kBF16);
  EXPECT_LT(max_abs_diff(gelu(xb), gelu(x)), 1e-2);
  EXPECT_LT(max_abs_diff(sigmoid(x.to(DType::kF16)), sigmoid(x)), 1e-3);
}

TEST(Elementwise, UnaryOnIntegers) {
  Tensor i = from_vector<int64_t>({-3, 0, 4});
  EXPECT_EQ(neg(i).dtype(), DType::kI64);
  EXPECT_EQ(vals(neg(i)), (std::vector<double>{3, 0, -4}));
  EXPECT_EQ(vals(abs(i)), (std::vector<double>{3, 0, 4}));
  EXPECT_EQ(vals(sign(i)), (std::vector<double>{-1, 0, 1}));
  EXPECT_EQ(vals(relu(i)), (std::vector<double>{0, 0, 4}));
  // Floating math on integers runs in f32.
  Tensor e = exp(i);
  EXPECT_EQ(e.dtype(), DType::kF32);
  EXPECT_NEAR(e.to_vector<double>()[2], std::exp(4.0), 1e-4);
  EXPECT_EQ(sqrt(from_vector<int32_t>({4, 9})).dtype(), DType::kF32);
  EXPECT_ERROR_NAMING(neg(from_vector<bool>({true})), "neg");
}

TEST(Elementwise, Clamp) {
  Tensor x = from_vector<float>({-2, -0.5f, 0, 0.5f, 2});
  EXPECT_EQ(vals(clamp(x, -1.0, 1.0)), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(vals(clamp(x, 0.0, std::nullopt)), (std::vector<double>{0, 0, 0, 0.5, 2}));
  EXPECT_EQ(vals(clamp(x, std::nullopt, 0.0)), (std::vector<double>{-2, -0.5, 0, 0, 0}));
  Tensor i = from_vector<int64_t>({-5, 0, 5});
  EXPECT_EQ(clamp(i, -1.0, 1.0).dtype(), DType::kI64);
  EXPECT_EQ(vals(clamp(i, -1.0, 1.0)), (std::vector<double>{-1, 0, 1}));
  Tensor half_bounds = clamp(i, -0.5, 2.5);  // non-integral bounds clamp in f32
  EXPECT_EQ(half_bounds.dtype(), DType::kF32);
  EXPECT_EQ(vals(half_bounds), (std::vector<double>{-0.5, 0, 2.5}));
  EXPECT_EQ(vals(clamp(x.slice(0, 0, 5, 2), 0.0, 1.0)), (std::vector<double>{0, 0, 1}));
  EXPECT_ERROR_NAMING(clamp(x, std::nullopt, std::nullopt), "clamp: at least one of min and max");
  EXPECT_ERROR_NAMING(clamp(x, NAN, 1.0), "clamp");
}

TEST(Elementwise, Where) {
  Tensor cond = from_vector<bool>({true, false, true}, {3, 1});
  Tensor a = seq({1, 4}, 1, 1);  // [[1,2,3,4]]
  Tensor b = scalar_tensor(-1, DType::kI64);
  Tensor out = where(cond, a, b);
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  EXPECT_EQ(out.dtype(), DType::kF32);
  EXPECT_EQ(vals(out), (std::vector<double>{1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4}));
  EXPECT_ERROR_NAMING(where(from_vector<float>({1, 0, 1}), a, b), "where: cond must be bool, got f32");
  EXPECT_ERROR_NAMING(where(from_vector<bool>({true, false}), a, b), "where");
}

TEST(Elementwise, Operators) {
  Tensor x = from_vector<float>({1, 2, 4});
  Tensor y = from_vector<float>({4, 2, 1});
  EXPECT_EQ(vals(x + y), (std::vector<double>{5, 4, 5}));
  EXPECT_EQ(vals(x - y), (std::vector<double>{-3, 0, 3}));
  EXPECT_EQ(vals(x * y), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(vals(x / y), (std::vector<double>{0.25, 1, 4}));
  EXPECT_EQ(vals(-x), (std::vector<double>{-1, -2, -4}));
  EXPECT_EQ(vals(x + 1.0), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(x - 1.0), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ(vals(x * 0.5), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(x / 2.0), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(1.0 + x), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(1.0 - x), (std::vector<double>{0, -1, -3}));
  EXPECT_EQ(vals(2.0 * x), (std::vector<double>{2, 4, 8}));
  EXPECT_EQ(vals(4.0 / x), (std::vector<double>{4, 2, 1}));
  Tensor i = from_vector<int64_t>({1, 2, 4});
  EXPECT_EQ((3.0 - i).dtype(), DType::kI64);
  EXPECT_EQ(vals(1.0 / i), (std::vector<double>{1, 0.5, 0.25}));
}

TEST(Elementwise, Errors) {
  Tensor a = zeros({2, 3});
  EXPECT_ERROR_NAMING(add(a, zeros({4})), "add: shapes [2, 3] and [4] do not broadcast");
  EXPECT_ERROR_NAMING(mul(a, zeros({3, 3})), "mul");
  EXPECT_ERROR_NAMING(lt(a, zeros({2, 2})), "lt");
  EXPECT_ERROR_NAMING(add(a, Tensor()), "add: b is an undefined tensor");
  EXPECT_ERROR_NAMING(exp(Tensor()), "exp");
  EXPECT_ERROR_NAMING(sub(from_vector<bool>({true}), from_vector<bool>({false})), "sub: not defined for bool");
}

TEST(Elementwise, DeviceMismatch) {
  if (!cuda_available()) GTEST_SKIP() << "needs a GPU to make a tensor on another device";
  Tensor a = zeros({2});
  Tensor b = zeros({2}, Device::cuda(0));
  EXPECT_ERROR_NAMING(add(a, b), "add: operands are on different devices (cpu and cuda:0)");
  EXPECT_ERROR_NAMING(where(full({2}, 1, DType::kBool), a, b), "where: operands are on different devices");
  // The same ops give the same numbers on the GPU.
  Tensor x = seq({3, 4}, -1, 0.25);
  Tensor y = seq({4}, 0.5, 0.5);
  EXPECT_EQ(max_abs_diff(add(x, y), add(x.to(Device::cuda(0)), y.to(Device::cuda(0)))), 0.0);
  EXPECT_LT(max_abs_diff(gelu(x), gelu(x.to(Device::cuda(0)))), 1e-6);
}

}  // namespace
}  // namespace coppice
