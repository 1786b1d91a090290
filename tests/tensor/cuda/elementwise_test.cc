// CPU parity of fill_, copy_, the unary and binary primitives and where;
// the 16-byte packs of bf16/f16 unary and binary ops give the bits of the
// element-at-a-time kernels.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/binary_ops.h"
#include "tensor/half.h"
#include "tensor/kernels.h"
#include "tensor/unary_ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Attrs value_attr(double v) {
  Attrs a;
  a.set("value", v);
  return a;
}

TEST(CudaFillTest, EveryDtypeContiguousStridedEmpty) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    for (double v : {3.0, -0.0, 0.1, 1e30, kNaN}) {
      if (!is_floating(t) && (std::isnan(v) || std::abs(v) > 1e9 || (t == DType::kU8 && v < 0))) continue;
      Tensor c = Tensor::empty({5, 6}, t), g = Tensor::empty({5, 6}, TensorOptions(t, gpu()));
      c.zero_();
      g.zero_();
      dispatch("fill_", {c.slice(1, 1, 6, 2)}, value_attr(v));  // a strided view
      dispatch("fill_", {g.slice(1, 1, 6, 2)}, value_attr(v));
      expect_match(g, c, 0, 0, str_cat(dtype_name(t), " fill ", v));
      dispatch("fill_", {c.t()}, value_attr(v));
      dispatch("fill_", {g.t()}, value_attr(v));
      expect_match(g, c, 0, 0, str_cat(dtype_name(t), " fill ", v));
    }
    Tensor e = Tensor::empty({0, 4}, TensorOptions(t, gpu()));
    EXPECT_NO_THROW(dispatch("fill_", {e}, value_attr(1)));
    Tensor s = Tensor::empty({}, TensorOptions(t, gpu()));
    dispatch("fill_", {s}, value_attr(1));
    EXPECT_EQ(s.item(), 1.0);
  }
}

// dst view and src view of every dtype pair, compared with the CPU's copy_.
void check_copy(DType dt, DType st, const Shape& dst_shape, const Tensor& src_host,
                const std::function<Tensor(const Tensor&)>& dst_view,
                const std::function<Tensor(const Tensor&)>& src_view, const std::string& what) {
  Tensor c = Tensor::empty(dst_shape, dt), g = Tensor::empty(dst_shape, TensorOptions(dt, gpu()));
  c.zero_();
  g.zero_();
  Tensor gs = src_host.to(gpu());
  dispatch("copy_", {dst_view(c), src_view(src_host)});
  dispatch("copy_", {dst_view(g), src_view(gs)});
  expect_match(g, c, 0, 0, str_cat(what, " ", dtype_name(st), " -> ", dtype_name(dt)));
}

TEST(CudaCopyTest, EveryDtypePairAndLayout) {
  COPPICE_REQUIRE_GPU();
  auto same = [](const Tensor& t) { return t; };
  for (DType st : all_dtypes()) {
    // Values every destination type holds without overflow (no negatives for u8).
    Tensor src = random({6, 10}, st, 7, 0, 5);
    for (DType dt : all_dtypes()) {
      check_copy(dt, st, {6, 10}, src, same, same, "contiguous");
      check_copy(
          dt, st, {10, 6}, src, [](const Tensor& t) { return t.t(); }, same, "transposed dst");
      check_copy(
          dt, st, {6, 4}, src, same, [](const Tensor& t) { return t.slice(1, 0, 10, 3); }, "strided src");
      check_copy(
          dt, st, {3, 6, 10}, src, same, [](const Tensor& t) { return t.narrow(1, 2, 1); }, "broadcast src");
    }
  }
}

TEST(CudaCopyTest, SpecialValuesAndSignedConversions) {
  COPPICE_REQUIRE_GPU();
  Tensor f = make({8}, {-0.0, kInf, -kInf, kNaN, 1e-40, 65504, 70000, -3.75}, DType::kF64);
  for (DType dt : floating_dtypes()) {
    check_copy(
        dt, DType::kF64, {8}, f, [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; }, "special");
  }
  Tensor s = make({6}, {-7.9, -0.5, 0.5, 3.99, -100, 100}, DType::kF32);
  for (DType dt : {DType::kI32, DType::kI64, DType::kBool}) {
    check_copy(
        dt, DType::kF32, {6}, s, [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; }, "truncate");
  }
  Tensor empty = Tensor::empty({0, 3});
  check_copy(
      DType::kF64, DType::kF32, {0, 3}, empty, [](const Tensor& t) { return t; }, [](const Tensor& t) { return t; },
      "empty");
}

TEST(CudaCopyTest, OverlappingViewsOfOneStorage) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kF32, DType::kI64}) {
    Tensor c = random({50}, t, 8), g = c.to(gpu());
    dispatch("copy_", {c.narrow(0, 1, 49), c.narrow(0, 0, 49)});  // shift right by one
    dispatch("copy_", {g.narrow(0, 1, 49), g.narrow(0, 0, 49)});
    expect_match(g, c, 0, 0, "shift");
    Tensor m = random({6, 6}, t, 9), h = m.to(gpu());
    dispatch("copy_", {m, m.t()});  // in-place transpose
    dispatch("copy_", {h, h.t()});
    expect_match(h, m, 0, 0, "transpose in place");
    dispatch("copy_", {h, h});  // the same view: nothing to do
    expect_match(h, m, 0, 0, "self");
  }
}

TEST(CudaCopyTest, MismatchedShapesThrow) {
  COPPICE_REQUIRE_GPU();
  Tensor a = Tensor::empty({2, 3}, TensorOptions(gpu())), b = Tensor::empty({3, 2}, TensorOptions(gpu()));
  expect_error([&] { dispatch("copy_", {a, b}); }, "copy_");
}

bool takes_integers(std::string_view op) {
  return op == "neg" || op == "abs" || op == "sign" || op == "relu" || op == "clamp";
}
bool exact_unary(std::string_view op) { return takes_integers(op) || op == "sqrt" || op == "rsqrt"; }

TEST(CudaUnaryTest, EveryOpEveryDtype) {
  COPPICE_REQUIRE_GPU();
  const std::vector<double> specials = {0.0, -0.0, kInf, -kInf, kNaN, 1e-3, -1e-3, 30, -30, 100, -100, 0.5};
  std::vector<std::string_view> ops = unary_ops::names();
  ops.push_back("clamp");
  for (std::string_view name : ops) {
    const std::string op(name);
    for (DType t : all_dtypes()) {
      if (!is_floating(t) && !takes_integers(op)) continue;
      if (t == DType::kBool && op == "neg") continue;
      Attrs attrs;
      if (op == "clamp") attrs.set("min", -1.25).set("max", 0.75);
      const double lo = (op == "log" || op == "sqrt" || op == "rsqrt") ? 0 : -4;
      std::vector<double> v = noise(3 * 37, 11, lo, 4);
      if (is_floating(t)) std::copy(specials.begin(), specials.end(), v.begin());
      Tensor x = is_floating(t) ? make({3, 37}, v, t) : random({3, 37}, t, 5);
      const Tol tol = exact_unary(op) ? Tol{0, 0} : math_tol(t);
      expect_parity(op, {x}, attrs, tol.rtol, tol.atol, str_cat(dtype_name(t)));
      // A transposed (non-contiguous) input.
      expect_parity(op, {x}, attrs, tol.rtol, tol.atol, str_cat(dtype_name(t), " transposed"),
                    [](size_t, const Tensor& a) { return a.t(); });
      // Empty and 0-d.
      expect_parity(op, {Tensor::empty({0, 5}, t)}, attrs, 0, 0, str_cat(dtype_name(t), " empty"));
      expect_parity(op, {make({}, {1.0}, t)}, attrs, tol.rtol, tol.atol, str_cat(dtype_name(t), " 0-d"));
    }
  }
}

TEST(CudaUnaryTest, IntegerClampBoundsAndOneSided) {
  COPPICE_REQUIRE_GPU();
  Tensor x = random({50}, DType::kI32, 3);
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{-5.5, 7.5}, {-kInf, 3}, {2, kInf}, {10, -10}}) {
    Attrs a;
    a.set("min", lo).set("max", hi);
    expect_parity("clamp", {x}, a, 0, 0, str_cat("i32 [", lo, ", ", hi, "]"));
    expect_parity("clamp", {x.to(DType::kU8)}, a, 0, 0, str_cat("u8 [", lo, ", ", hi, "]"));
    expect_parity("clamp", {x.to(DType::kF32)}, a, 0, 0, str_cat("f32 [", lo, ", ", hi, "]"));
  }
}

TEST(CudaUnaryTest, RejectsWhatTheCpuRejects) {
  COPPICE_REQUIRE_GPU();
  expect_error([] { dispatch("neg", {Tensor::empty({2}, TensorOptions(DType::kBool, gpu()))}); }, "bool");
  expect_error([] { dispatch("exp", {Tensor::empty({2}, TensorOptions(DType::kI32, gpu()))}); }, "floating");
}

// The binary ops of floating dtypes only (their kDomain).
bool floating_only(std::string_view op) {
  bool floating = false;
  binary_ops::for_each([&](auto o) {
    if (op == decltype(o)::kName) floating = decltype(o)::kDomain == unary_ops::Domain::kFloating;
  });
  return floating;
}

// The gelu gradients (erf, exp, tanh) and pow round as CUDA's and libm's functions do.
bool transcendental(std::string_view op) { return op == "pow" || op == "gelu_backward" || op == "gelu_tanh_backward"; }

TEST(CudaBinaryTest, EveryOpEveryDtypeWithBroadcast) {
  COPPICE_REQUIRE_GPU();
  for (std::string_view name : binary_ops::names()) {
    const std::string op(name);
    for (DType t : all_dtypes()) {
      if (floating_only(op) && !is_floating(t)) continue;
      if (op == "sub" && t == DType::kBool) continue;
      const bool pow = op == "pow";
      Tensor a = random({4, 1, 33}, t, 21, pow ? 0 : -2, 2);
      Tensor b = random({5, 33}, t, 22, -2, 2);
      if (is_floating(t)) {  // specials in both, aligned with each other in places
        std::vector<double> av = values(a), bv = values(b);
        const std::vector<double> s = {kNaN, 1, kInf, -kInf, 0, -0.0, 2, kNaN};
        for (size_t i = 0; i < s.size(); ++i) {
          av[i] = s[i];
          bv[i] = s[s.size() - 1 - i];
        }
        if (pow) av[3] = 4;  // keep the base non-negative
        a = make(a.shape(), av, t);
        b = make(b.shape(), bv, t);
      }
      const Tol tol = transcendental(op) ? math_tol(t) : Tol{0, 0};
      expect_parity(op, {a, b}, {}, tol.rtol, tol.atol, str_cat(dtype_name(t), " broadcast"));
      expect_parity(op, {b, b}, {}, tol.rtol, tol.atol, str_cat(dtype_name(t), " same shape"));
      // Non-contiguous operands: b transposed twice over a permuted view.
      expect_parity(op, {b, b}, {}, tol.rtol, tol.atol, str_cat(dtype_name(t), " strided"),
                    [](size_t i, const Tensor& x) { return i == 0 ? x.slice(1, 0, 32, 2) : x.slice(1, 1, 33, 2); });
      // A 0-d operand and an empty one.
      expect_parity(op, {a, make({}, {1.0}, t)}, {}, tol.rtol, tol.atol, str_cat(dtype_name(t), " scalar"));
      expect_parity(op, {Tensor::empty({0, 33}, t), b.narrow(0, 0, 1)}, {}, 0, 0, str_cat(dtype_name(t), " empty"));
    }
  }
}

TEST(CudaBinaryTest, IntegerWrapAround) {
  COPPICE_REQUIRE_GPU();
  Tensor a = make({4}, {2147483647.0, -2147483648.0, 65536, -7}, DType::kI32);
  Tensor b = make({4}, {1, -1, 65536, 3}, DType::kI32);
  for (const char* op : {"add", "sub", "mul"}) expect_parity(op, {a, b}, {}, 0, 0, "i32 overflow");
  Tensor u = make({3}, {250, 3, 0}, DType::kU8), v = make({3}, {10, 7, 1}, DType::kU8);
  for (const char* op : {"add", "sub", "mul", "maximum"}) expect_parity(op, {u, v}, {}, 0, 0, "u8 wrap");
}

TEST(CudaBinaryTest, MismatchedDtypesThrow) {
  COPPICE_REQUIRE_GPU();
  Tensor a = Tensor::empty({2}, TensorOptions(DType::kF32, gpu())),
         b = Tensor::empty({2}, TensorOptions(DType::kF64, gpu()));
  expect_error([&] { dispatch("add", {a, b}); }, "one dtype");
  expect_error([&] { dispatch("div", {a.to(DType::kI32), b.to(DType::kI32)}); }, "floating");
}

TEST(CudaWhereTest, EveryDtypeBroadcastAndStrided) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    Tensor cond = random({3, 1, 8}, DType::kBool, 31);
    Tensor a = random({4, 8}, t, 32), b = random({3, 4, 1}, t, 33);
    expect_parity("where", {cond, a, b}, {}, 0, 0, str_cat(dtype_name(t)));
    expect_parity("where", {random({8, 4}, DType::kBool, 34), random({8, 4}, t, 35), random({8, 4}, t, 36)}, {}, 0, 0,
                  str_cat(dtype_name(t), " transposed"), [](size_t, const Tensor& x) { return x.t(); });
    expect_parity("where", {Tensor::empty({0, 8}, DType::kBool), Tensor::empty({0, 1}, t), Tensor::empty({8}, t)}, {},
                  0, 0, str_cat(dtype_name(t), " empty"));
  }
}

// `t` on the GPU as a view one element into a larger buffer: contiguous but
// not 16-byte aligned, so the ops take the element-at-a-time kernels.
Tensor on_gpu_misaligned(const Tensor& t) {
  Tensor buffer = Tensor::empty({t.numel() + 1}, TensorOptions(t.dtype(), gpu()));
  Tensor view = buffer.narrow(0, 1, t.numel()).view(t.shape());
  view.copy_(t.to(gpu()));
  EXPECT_NE(reinterpret_cast<uintptr_t>(view.data_ptr()) % 16, 0u);
  return view;
}

// gelu, gelu_backward and add (the GPT MLP's and residual's passes) and a
// few more on bf16/f16: the packed kernels (aligned, contiguous operands of
// one shape) against the element-at-a-time kernels on the same values (an
// operand at an odd offset), bit for bit; both against the CPU; the same
// bits again. Lengths below one pack, a whole number of packs, and a tail.
TEST(CudaPackedTest, SixteenBitOpsMatchTheElementKernelsBitForBit) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int64_t n : {1, 7, 8, 64, 1000, 4099}) {
      const std::string what = str_cat(dtype_name(t), " n ", n);
      Tensor x = random({n}, t, 40 + n, -5, 5), y = random({n}, t, 41 + n, -3, 3);
      if (n >= 8) {  // specials in the first pack
        std::vector<double> v = values(x);
        const std::vector<double> s = {0.0, -0.0, kInf, -kInf, kNaN, 30, -30, 1e-3};
        std::copy(s.begin(), s.end(), v.begin());
        x = make({n}, v, t);
      }
      for (const char* op : {"gelu", "exp", "neg"}) {
        const Tensor packed = dispatch(op, {x.to(gpu())})[0];
        const Tensor plain = dispatch(op, {on_gpu_misaligned(x)})[0];
        expect_match(packed, plain.to(Device::cpu()), 0, 0, str_cat(op, " packed vs element ", what));
        expect_match(dispatch(op, {x.to(gpu())})[0], packed.to(Device::cpu()), 0, 0, str_cat(op, " again ", what));
        const Tol tol = std::string(op) == "neg" ? Tol{0, 0} : math_tol(t);
        expect_match(packed, dispatch(op, {x})[0], tol.rtol, tol.atol, str_cat(op, " cpu ", what));
      }
      for (const char* op : {"gelu_backward", "add", "mul"}) {
        const Tensor packed = dispatch(op, {y.to(gpu()), x.to(gpu())})[0];
        // One operand misaligned is enough to leave the packed kernel.
        const Tensor plain = dispatch(op, {y.to(gpu()), on_gpu_misaligned(x)})[0];
        expect_match(packed, plain.to(Device::cpu()), 0, 0, str_cat(op, " packed vs element ", what));
        expect_match(dispatch(op, {y.to(gpu()), x.to(gpu())})[0], packed.to(Device::cpu()), 0, 0,
                     str_cat(op, " again ", what));
        const Tol tol = std::string(op) == "gelu_backward" ? math_tol(t) : Tol{0, 0};
        expect_match(packed, dispatch(op, {y, x})[0], tol.rtol, tol.atol, str_cat(op, " cpu ", what));
      }
    }
  }
}

// The f32 gelu and its gradient on the GPU, where scalar_math.h's tail
// comes from ex2.approx and rcp.approx, over every finite bf16 input: within
// the bounds tests/tensor:gelu_math_test holds on the CPU (a little wider:
// the two approximations' few ulps), against the exact values.
TEST(CudaUnaryTest, GeluOverEveryBf16InputNearTheExactValues) {
  COPPICE_REQUIRE_GPU();
  std::vector<double> xs;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    BFloat16 b;
    b.bits = static_cast<uint16_t>(bits);
    if (std::isfinite(static_cast<float>(b))) xs.push_back(b);
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = make({n}, xs, DType::kF32).to(gpu());
  const Tensor ones = make({n}, std::vector<double>(xs.size(), 1.0), DType::kF32).to(gpu());
  const std::vector<double> y = values(dispatch("gelu", {x})[0].to(Device::cpu()));
  const std::vector<double> dy = values(dispatch("gelu_backward", {ones, x})[0].to(Device::cpu()));
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double want = v * cdf, factor = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    ASSERT_LE(std::fabs(y[i] - want), 4e-7 * std::fabs(v) + 1e-37) << "gelu(" << v << ")";
    if (v < -1.0 && v > -9.0) { ASSERT_LE(std::fabs(y[i] - want), 2e-4 * std::fabs(want)) << "gelu(" << v << ")"; }
    ASSERT_LE(std::fabs(dy[i] - factor), 4e-7) << "gelu_backward(1, " << v << ")";
  }
}

// A block of the output's last dimensions broadcast over its leading ones
// (a linear layer's bias row over [rows, c]; a GPT's [T, D] position table
// over [N, T, D], with or without a leading 1), on either side: packed
// against the element kernel (the block misaligned) bit for bit, and the
// CPU. Rows whose length is not a whole pack ({20}), and blocks that are not
// the output's trailing shape ([T, 1], a middle dimension), stay on the
// element kernel, still the CPU's values.
TEST(CudaPackedTest, TrailingBlockBroadcastMatchesTheElementKernelBitForBit) {
  COPPICE_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 64}, {64}},        {{37, 1024}, {1024}},      {{2, 5, 48}, {48}},       {{1, 8}, {8}},
      {{9, 20}, {20}},        {{3, 16, 64}, {16, 64}},   {{2, 5, 48}, {1, 5, 48}}, {{4, 3, 2, 8}, {3, 2, 8}},
      {{3, 16, 64}, {16, 1}}, {{3, 16, 64}, {3, 1, 64}}, {{2, 7, 24}, {7, 24}}};
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (const auto& [shape, block_shape] : cases) {
      const std::string what =
          str_cat(dtype_name(t), " ", shape_to_string(block_shape), " over ", shape_to_string(shape));
      const Tensor a = random(shape, t, 62, -4, 4), block = random(block_shape, t, 63, -4, 4);
      for (const char* op : {"add", "sub", "mul"}) {
        for (bool block_first : {false, true}) {
          auto on = [&](const Tensor& b) {
            return block_first ? dispatch(op, {b, a.to(gpu())})[0] : dispatch(op, {a.to(gpu()), b})[0];
          };
          const Tensor packed = on(block.to(gpu())), plain = on(on_gpu_misaligned(block));
          const std::string w = str_cat(op, block_first ? " block first " : " block second ", what);
          expect_match(packed, plain.to(Device::cpu()), 0, 0, str_cat(w, " packed vs element"));
          const Tensor cpu = block_first ? dispatch(op, {block, a})[0] : dispatch(op, {a, block})[0];
          expect_match(packed, cpu, 0, 0, str_cat(w, " cpu"));
        }
      }
    }
  }
}

// Operands of one shape but not of the output's (a broadcast), or not
// contiguous, are not packed; the results are still the CPU's.
TEST(CudaPackedTest, BroadcastAndStridedOperandsStayCorrect) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF16}) {
    const Tensor a = random({16, 64}, t, 50), row = random({64}, t, 51);
    expect_parity("add", {a, row}, {}, 0, 0, str_cat(dtype_name(t), " bias row"));
    expect_parity("gelu_backward", {a, a}, {}, math_tol(t).rtol, math_tol(t).atol, str_cat(dtype_name(t), " strided"),
                  [](size_t, const Tensor& x) { return x.t(); });
    expect_parity("gelu", {a}, {}, math_tol(t).rtol, math_tol(t).atol, str_cat(dtype_name(t), " column slice"),
                  [](size_t, const Tensor& x) { return x.slice(1, 8, 64); });
  }
}

}  // namespace
}  // namespace coppice
