// SparsifiedOp (sparsifiers/sparsified_op.h): for linear (dense and CSR
// weights), matmul, add, relu, gelu, conv2d, attention scores and user ops,
// the forward value equals the dense op's output masked and scaled as the
// stages say, the backward gradients equal the dense gradients masked as the
// stages say, and float64 gradcheck passes through forward sparsification.
// The sparsifiers are small ones defined here (the built-ins are tested with
// their own files).
#include "sparsifiers/sparsified_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "autograd/sparse_grad.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/fusable.h"
#include "sparsifiers/fused_relu.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/sparsify_stage.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using V = std::vector<Variable>;

Generator& test_gen() {
  static Generator gen(4321);
  return gen;
}
Tensor randn64(const Shape& shape) { return randn(shape, DType::kF64, test_gen()); }
// Standard normal values at least 0.1 away from `point` (kinks, thresholds).
Tensor randn_away(const Shape& shape, double point) {
  Tensor d = randn64(shape);
  Tensor pushed = add(d, mul(sign(d), 0.1));
  return add(where(eq(pushed, 0.0), full_like(pushed, 0.1), pushed), point);
}
Variable param(const Tensor& t, const char* name = "") { return Variable(t, true, name); }
Variable constant(const Tensor& t) { return Variable(t, false); }

#define EXPECT_GRADCHECK(fn, ...)                                                 \
  do {                                                                            \
    ::coppice::GradcheckResult gc_result = ::coppice::gradcheck(fn, __VA_ARGS__); \
    EXPECT_TRUE(gc_result.passed) << gc_result.message;                           \
  } while (0)

// Keeps |x| > t (streaming; fusable into relu_to_csr).
class Threshold : public Sparsifier, public ThresholdFusable {
 public:
  explicit Threshold(double t) : t_(t) {}
  std::string describe() const override { return str_cat("test_threshold(", t_, ")"); }
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext&) const override { return gt(abs(x), t_); }
  double threshold() const override { return t_; }

 private:
  double t_;
};

// Keeps the `keep` fraction of entries with the largest magnitude (materializing).
class TopFraction : public Sparsifier {
 public:
  explicit TopFraction(double keep) : keep_(keep) {}
  std::string describe() const override { return str_cat("test_top(", keep_, ")"); }
  SparsifierKind kind() const override { return SparsifierKind::kMaterializing; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext&) const override {
    Tensor a = abs(x).contiguous();
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::lround(keep_ * a.numel())));
    Tensor kth = min(topk(a.reshape({-1}), k).values);
    return ge(a, kth);
  }

 private:
  double keep_;
};

// Drops each entry with probability p and rescales the kept by 1/(1-p); the
// draw depends on the context only (as the built-in random sparsifier).
class RandomDrop : public Sparsifier {
 public:
  explicit RandomDrop(double p) : p_(p) {}
  std::string describe() const override { return str_cat("test_random(", p_, ")"); }
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override {
    Generator gen = Generator::keyed(ctx.seed, ctx.purpose, ctx.step, ctx.rank);
    return ge(rand(x.shape(), DType::kF64, gen), p_);
  }
  double value_scale() const override { return 1.0 / (1.0 - p_); }

 private:
  double p_;
};

SparsifierPtr threshold(double t) { return std::make_shared<Threshold>(t); }
SparsifierPtr top(double keep) { return std::make_shared<TopFraction>(keep); }
SparsifierPtr random_drop(double p) { return std::make_shared<RandomDrop>(p); }

ValueSparsity stages(SparsifierPtr inline_s, std::string temp, SparsifierPtr external_s, std::string out) {
  return {std::move(inline_s), {std::move(temp), {}}, std::move(external_s), {std::move(out), {}}};
}

// The reference for one value: the dense value after both stages, and the
// factor (mask * scale of each stage) that multiplies the dense gradient.
struct Reference {
  Tensor value;
  Tensor factor;
};

Reference reference(const Tensor& y, const ValueSparsity& s, const SparsifyContext& stage_ctx_inline,
                    const SparsifyContext& stage_ctx_external) {
  Tensor v = to_dense(y);
  Tensor factor = ones_like(v);
  for (int stage = 0; stage < 2; ++stage) {
    const SparsifierPtr& sp = stage == 0 ? s.inline_sparsifier : s.external_sparsifier;
    if (!sp) continue;
    Tensor m = sp->keep_mask(v, stage == 0 ? stage_ctx_inline : stage_ctx_external).to(DType::kF64);
    Tensor f = mul(m, sp->value_scale());
    v = mul(v, f);
    factor = mul(factor, f);
  }
  return {v, factor};
}

void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const double err = max(abs(sub(to_dense(actual), expected))).item();
  EXPECT_LT(err, 1e-10) << what;
}

// A forward-only sparsified op with deterministic sparsifiers (threshold,
// top fraction): the masks of a stage do not depend on the context, so the
// test recomputes them on the dense output.
//
// Checks: the format of the result, its dense value against the reference,
// the gradient of every input against the dense gradient of
// <y_dense * factor, seed>, and gradcheck.
void check_forward(const SingleOpFn& op, const V& inputs, const ValueSparsity& out) {
  SCOPED_TRACE(out.describe());
  SparsifiedOp sop(op, out);
  Variable y = sop.call(inputs);
  EXPECT_EQ(std::string(y.value().format()), out.output_format.name);

  Tensor y_dense;
  {
    NoGradGuard no_grad;
    y_dense = to_dense(op(inputs).value());
  }
  Reference ref = reference(y_dense, out, {}, {});
  expect_close(y.value(), ref.value, "forward value");

  // Backward: the gradient of sum(y * seed) is the dense op's gradient of
  // sum(y_dense * factor * seed).
  Tensor seed = randn64(y_dense.shape());
  for (const Variable& v : inputs) v.set_grad(Tensor());
  sum(mul(to_dense(y), constant(seed))).backward();
  std::vector<Tensor> got;
  for (const Variable& v : inputs) got.push_back(v.grad());
  for (const Variable& v : inputs) v.set_grad(Tensor());
  sum(mul(to_dense(op(inputs)), constant(mul(ref.factor, seed)))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    ASSERT_TRUE(got[i].defined()) << "input " << i;
    EXPECT_EQ(got[i].format(), inputs[i].value().format()) << "input " << i;
    expect_close(got[i], to_dense(inputs[i].grad()), str_cat("gradient of input ", i));
  }

  EXPECT_GRADCHECK([&](const V& in) { return to_dense(sop.call(in)); }, inputs);
}

// A backward-only sparsified op: gradient i is the dense gradient sparsified
// by grads[i] (checked with the same deterministic sparsifiers).
void check_backward(const SingleOpFn& op, const V& inputs, const std::vector<ValueSparsity>& grads) {
  SparsifiedOp sop(op, ValueSparsity{}, grads);
  Variable y = sop.call(inputs);
  Tensor seed = randn64(y.shape());
  for (const Variable& v : inputs) v.set_grad(Tensor());
  y.backward(seed);
  std::vector<Tensor> got;
  for (const Variable& v : inputs) got.push_back(v.grad());
  for (const Variable& v : inputs) v.set_grad(Tensor());
  op(inputs).backward(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    SCOPED_TRACE(str_cat("input ", i, ": ", grads[i].describe()));
    ASSERT_TRUE(got[i].defined());
    // The gradient keeps the input's layout (a sparse input's pattern).
    EXPECT_EQ(got[i].format(), inputs[i].value().format());
    if (inputs[i].value().is_sparse()) { EXPECT_EQ(pattern_version(got[i]), pattern_version(inputs[i].value())); }
    Reference ref = reference(to_dense(inputs[i].grad()), grads[i], {}, {});
    Tensor expected = ref.value;
    if (inputs[i].value().is_sparse()) {  // projected back onto the pattern
      expected = to_dense(project_grad(expected, inputs[i].value(), "test"));
    }
    expect_close(got[i], expected, "sparsified gradient");
  }
}

Tensor random_csr(const Shape& shape) {
  Tensor mask = lt(rand(shape, DType::kF64, test_gen()), 0.5);
  return sparse_from_mask(randn_away(shape, 0.0), mask, "csr");
}

// ---- linear / matmul ---------------------------------------------------------

SingleOpFn linear_op() {
  return [](const V& in) { return linear(in[0], in[1], in[2]); };
}

TEST(SparsifiedOp, LinearDenseWeightForward) {
  V in = {param(randn64({4, 6}), "x"), param(randn64({5, 6}), "w"), param(randn64({5}), "b")};
  check_forward(linear_op(), in, stages(top(0.5), "dense", nullptr, "dense"));
  check_forward(linear_op(), in, stages(top(0.5), "csr", nullptr, "csr"));
  check_forward(linear_op(), in, stages(top(0.6), "coo", top(0.3), "csr"));
}

TEST(SparsifiedOp, LinearDenseWeightBackward) {
  V in = {param(randn64({4, 6}), "x"), param(randn64({5, 6}), "w"), param(randn64({5}), "b")};
  check_backward(linear_op(), in,
                 {stages(top(0.5), "dense", nullptr, "dense"), stages(top(0.5), "csr", nullptr, "csr"),
                  stages(nullptr, "dense", top(0.4), "coo")});
}

TEST(SparsifiedOp, LinearCsrWeight) {
  V in = {param(randn64({4, 6}), "x"), param(random_csr({5, 6}), "w"), param(randn64({5}), "b")};
  check_forward(linear_op(), in, stages(top(0.5), "csr", nullptr, "dense"));
  // The weight's gradient: the top half of its (pattern-sized) gradient, on its pattern.
  check_backward(linear_op(), in,
                 {stages(top(0.5), "dense", nullptr, "dense"), stages(top(0.25), "csr", nullptr, "csr"), {}});
}

TEST(SparsifiedOp, Matmul) {
  SingleOpFn op = [](const V& in) { return matmul(in[0], in[1]); };
  V in = {param(randn64({3, 5}), "a"), param(randn64({5, 4}), "b")};
  check_forward(op, in, stages(threshold(0.5), "csr", top(0.5), "coo"));
  check_backward(op, in, {stages(threshold(0.5), "dense", nullptr, "dense"), stages(nullptr, "csr", top(0.5), "csr")});
  V sparse_in = {param(random_csr({3, 5}), "s"), param(randn64({5, 4}), "b")};
  check_forward(op, sparse_in, stages(top(0.5), "csr", nullptr, "csr"));
  check_backward(op, sparse_in, {stages(top(0.5), "csr", nullptr, "csr"), stages(top(0.5), "dense", nullptr, "dense")});
}

// ---- elementwise ---------------------------------------------------------------

TEST(SparsifiedOp, Add) {
  SingleOpFn op = [](const V& in) { return add(in[0], in[1]); };
  V in = {param(randn64({4, 5}), "a"), param(randn64({4, 5}), "b")};
  check_forward(op, in, stages(threshold(0.7), "csr", nullptr, "dense"));
  check_backward(op, in, {stages(top(0.3), "dense", nullptr, "dense"), stages(threshold(0.5), "coo", nullptr, "csr")});
}

TEST(SparsifiedOp, ReluAndGelu) {
  SingleOpFn r = [](const V& in) { return relu(in[0]); };
  SingleOpFn g = [](const V& in) { return gelu(in[0]); };
  V in = {param(randn_away({5, 6}, 0.0), "x")};
  check_forward(r, in, stages(nullptr, "csr", nullptr, "csr"));
  check_forward(r, in, stages(threshold(0.4), "csr", nullptr, "dense"));
  check_forward(g, in, stages(top(0.5), "dense", nullptr, "coo"));
  check_backward(g, in, {stages(top(0.5), "csr", nullptr, "dense")});
}

// A block format stores whole blocks, dropped entries inside them as explicit
// zeros: they get no gradient all the same (the mask, not the pattern, decides).
TEST(SparsifiedOp, BlockFormatMasksInsideBlocks) {
  SingleOpFn op = [](const V& in) { return mul(in[0], 2.0); };
  V in = {param(randn64({4, 6}), "x")};
  ValueSparsity out = stages(top(0.3), "bsr", nullptr, "bsr");
  out.temporary_format.options = FormatOptions::block(2);
  out.output_format.options = FormatOptions::block(2);
  check_forward(op, in, out);
  Variable y = SparsifiedOp(op, out).call(in);
  EXPECT_GT(nnz(y.value()), nnz(to_format(to_dense(y.value()), "coo")));  // explicit zeros are stored
}

TEST(SparsifiedOp, Conv2d) {
  SingleOpFn op = [](const V& in) { return conv2d(in[0], in[1], in[2], Conv2dOptions{{1, 1}, {1, 1}}); };
  V in = {param(randn64({2, 2, 5, 5}), "x"), param(randn64({3, 2, 3, 3}), "w"), param(randn64({3}), "b")};
  check_forward(op, in, stages(top(0.3), "dense", nullptr, "dense"));
  check_forward(op, in, stages(top(0.3), "coo", nullptr, "coo"));  // COO holds the 4-D output
  check_backward(op, in,
                 {{}, stages(top(0.5), "dense", nullptr, "dense"), stages(top(0.5), "dense", nullptr, "dense")});
}

// ---- attention scores, user ops ---------------------------------------------------

// softmax(Q K^T / sqrt(d)) as a user lambda; its top half (per the whole
// matrix) goes on in CSR into a sparse x dense matmul with V.
TEST(SparsifiedOp, AttentionScores) {
  SingleOpFn scores = [](const V& in) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(in[0].size(1)));
    return softmax(mul(matmul(in[0], t(in[1])), scale), 1);
  };
  V qk = {param(randn64({4, 3}), "q"), param(randn64({5, 3}), "k")};
  check_forward(scores, qk, stages(top(0.5), "csr", nullptr, "csr"));
  check_backward(scores, qk, {stages(top(0.5), "dense", nullptr, "dense"), stages(nullptr, "dense", top(0.5), "csr")});

  SparsifiedOp sop(scores, stages(top(0.5), "csr", nullptr, "csr"));
  Variable v = param(randn64({5, 2}), "v");
  Variable out = matmul(sop.call(qk), v);
  EXPECT_EQ(out.shape(), (Shape{4, 2}));
  EXPECT_GRADCHECK([&](const V& in) { return matmul(sop.call({in[0], in[1]}), in[2]); }, {qk[0], qk[1], v});
}

// A user's own differentiable function (written with record) and a user op
// with two outputs, each with its own stages.
Variable cube(const Variable& x) {
  Tensor xv = x.value();
  return record(mul(mul(xv, xv), xv), "CubeBackward", {x},
                [xv](const Tensor& g, const GradNeeds&) { return std::vector<Tensor>{mul(g, mul(mul(xv, xv), 3.0))}; });
}

TEST(SparsifiedOp, UserOps) {
  SingleOpFn op = [](const V& in) { return cube(in[0]); };
  V in = {param(randn64({3, 4}), "x")};
  check_forward(op, in, stages(top(0.5), "coo", threshold(0.2), "csr"));
  check_backward(op, in, {stages(threshold(0.5), "csr", top(0.5), "dense")});

  SparsifiedOp two(
      [](const V& x) {
        return V{mul(x[0], x[1]), add(x[0], x[1])};
      },
      {stages(top(0.5), "csr", nullptr, "csr"), stages(nullptr, "dense", threshold(0.5), "dense")});
  V ab = {param(randn64({3, 4}), "a"), param(randn64({3, 4}), "b")};
  V outs = two(ab);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(std::string(outs[0].value().format()), "csr");
  EXPECT_EQ(nnz(outs[0].value()), 6);
  Tensor sum_ab = add(ab[0].value(), ab[1].value());
  expect_close(outs[1].value(), where(gt(abs(sum_ab), 0.5), sum_ab, zeros_like(sum_ab)), "second output");
  EXPECT_GRADCHECK([&](const V& x) { return add(to_dense(two(x)[0]), two(x)[1]); }, ab);
}

// ---- explicit masks, scale, fused relu, errors ---------------------------------------

TEST(SparsifiedOp, ExplicitMasks) {
  SingleOpFn identity = [](const V& in) { return mul(in[0], 1.0); };
  Variable x = param(from_vector<double>({0.5, -2.0, 1.5, 0.1}, {2, 2}), "x");
  // Forward: |y| > 1 keeps (0, 1) and (1, 0), stored as CSR.
  Variable y = SparsifiedOp(identity, stages(threshold(1.0), "csr", nullptr, "csr")).call({x});
  EXPECT_EQ(nnz(y.value()), 2);
  EXPECT_EQ(to_dense(y.value()).to_vector<double>(), (std::vector<double>{0, -2, 1.5, 0}));
  sum(to_dense(y)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));

  // Backward: the gradient (1, 2, 3, 4) keeps its entries above 2.5.
  x.set_grad(Tensor());
  Variable z = SparsifiedOp(identity, ValueSparsity{}, {stages(threshold(2.5), "csr", nullptr, "csr")}).call({x});
  EXPECT_EQ(to_dense(z.value()).to_vector<double>(), x.value().to_vector<double>());
  z.backward(from_vector<double>({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(x.grad().format(), "dense");  // autograd keeps a dense variable's gradient dense
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 3, 4}));
}

// A rescaling random sparsifier: the kept values and their gradients are
// multiplied by 1/(1-p); inline and external stages draw different masks;
// the same context gives the same mask.
TEST(SparsifiedOp, RandomScaledStages) {
  SingleOpFn identity = [](const V& in) { return mul(in[0], 1.0); };
  Variable x = param(randn_away({20, 20}, 0.0), "x");
  SparsifyContext ctx{7, 3, 1, 0};
  SparsifiedOp sop(identity, stages(random_drop(0.5), "dense", nullptr, "dense"));
  Variable y = sop.call({x}, ctx);
  Tensor kept = ne(y.value(), 0.0);
  expect_close(y.value(), where(kept, mul(x.value(), 2.0), zeros_like(x.value())), "scaled values");
  sum(y).backward();
  expect_close(x.grad(), mul(kept.to(DType::kF64), 2.0), "scaled gradient");
  EXPECT_EQ(sop.call({x}, ctx).value().to_vector<double>(), y.value().to_vector<double>());
  EXPECT_GRADCHECK([&](const V& in) { return sop.call(in, ctx); }, {x});

  SparsifiedOp both(identity, stages(random_drop(0.5), "dense", random_drop(0.5), "dense"));
  Tensor inline_only = ne(sop.call({x}, ctx).value(), 0.0).to(DType::kF64);
  Tensor after_both = ne(both.call({x}, ctx).value(), 0.0).to(DType::kF64);
  // Same inline mask (same stage context), then an independent external draw
  // keeps about half of it, not all of it.
  EXPECT_EQ(sum(mul(after_both, sub(ones_like(inline_only), inline_only))).item(), 0.0);
  const double ratio = sum(after_both).item() / sum(inline_only).item();
  EXPECT_GT(ratio, 0.3);
  EXPECT_LT(ratio, 0.7);
}

TEST(SparsifiedOp, FusedReluToCsr) {
  Variable x = param(randn_away({6, 7}, 0.3), "x");  // no entry near the threshold
  ValueSparsity out = stages(threshold(0.3), "csr", nullptr, "csr");
  SparsifiedOp fused = sparsified_relu(out);
  SparsifiedOp generic([](const V& in) { return relu(in[0]); }, out);
  Variable yf = fused.call({x});
  Variable yg = generic.call({x});
  // The fused kernel produced the CSR (its node is the last one), the same as the generic path.
  ASSERT_NE(yf.grad_fn(), nullptr);
  EXPECT_EQ(yf.grad_fn()->name(), "ReluToCsrBackward");
  EXPECT_NE(yg.grad_fn()->name(), "ReluToCsrBackward");
  EXPECT_EQ(std::string(yf.value().format()), "csr");
  expect_close(yf.value(), to_dense(yg.value()), "fused value");
  EXPECT_EQ(nnz(yf.value()), nnz(yg.value()));
  EXPECT_GRADCHECK([&](const V& in) { return to_dense(fused.call(in)); }, {x});
  check_forward([](const V& in) { return relu(in[0]); }, {x}, out);

  // Declined (not fusable): a top fraction, a dense temporary format, a 3-D input.
  EXPECT_NE(sparsified_relu(stages(top(0.5), "csr", nullptr, "csr")).call({x}).grad_fn()->name(), "ReluToCsrBackward");
  EXPECT_NE(sparsified_relu(stages(threshold(0.3), "dense", nullptr, "dense")).call({x}).grad_fn()->name(),
            "ReluToCsrBackward");
  Variable x3 = param(randn64({2, 3, 4}), "x3");
  EXPECT_EQ(sparsified_relu(stages(threshold(0.3), "dense", nullptr, "dense")).call({x3}).shape(), x3.shape());
  // With a sparsified input gradient: the fused kernel sees the wrapped input.
  SparsifiedOp with_grad = sparsified_relu(out, stages(top(0.25), "dense", nullptr, "dense"));
  Tensor seed = randn64(x.shape());
  x.set_grad(Tensor());
  Variable yw = with_grad.call({x});
  EXPECT_EQ(yw.grad_fn()->name(), "ReluToCsrBackward");
  sum(mul(to_dense(yw), constant(seed))).backward();
  Tensor g = where(gt(x.value(), 0.3), seed, zeros_like(seed));
  expect_close(x.grad(), where(TopFraction(0.25).keep_mask(g, {}), g, zeros_like(g)), "fused, sparsified gradient");

  // A keep-all inline stage fuses too (stores the non-zeros: relu > 0).
  Variable y0 = sparsified_relu(stages(nullptr, "csr", nullptr, "csr")).call({x});
  EXPECT_EQ(y0.grad_fn()->name(), "ReluToCsrBackward");
  EXPECT_EQ(nnz(y0.value()), static_cast<int64_t>(sum(gt(x.value(), 0.0).to(DType::kF64)).item()));
}

// relu_to_csr keeps exactly what the generic path keeps (relu, then the
// built-in threshold, which compares in f64) for every floating dtype, also
// where an entry equals the threshold as its dtype rounds it (0.1 rounds up
// in f32: that entry is above 0.1 and kept), and the gradient is the same.
TEST(SparsifiedOp, FusedReluTiesEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (double t : {0.0, 0.1, 0.3}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " t=", t));
      const double tie = from_vector<double>({t}, {1}).to(dtype).to(DType::kF64).to_vector<double>()[0];
      Tensor d = randn64({5, 9});
      d = where(gt(abs(d), 1.5), full_like(d, tie), d);  // about one entry in seven is a tie
      for (int64_t c = 0; c < 9; ++c) {                  // row 0 all ties, row 1 empty, row 2 all kept
        d.narrow(0, 0, 1).narrow(1, c, 1).fill_(tie);
        d.narrow(0, 1, 1).narrow(1, c, 1).fill_(-1.0);
        d.narrow(0, 2, 1).narrow(1, c, 1).fill_(t + 1.0);
      }
      Tensor x = d.to(dtype);
      SparsifierPtr inline_s = t > 0.0 ? make_sparsifier({"threshold", {{"threshold", str_cat(t)}}}) : nullptr;
      ValueSparsity out = stages(inline_s, "csr", nullptr, "csr");
      Variable xf = param(x, "x"), xg = param(x, "x");
      Variable yf = sparsified_relu(out).call({xf});
      Variable yg = SparsifiedOp([](const V& in) { return relu(in[0]); }, out).call({xg});
      EXPECT_EQ(yf.grad_fn()->name(), "ReluToCsrBackward");
      EXPECT_EQ(yf.value().dtype(), dtype);
      EXPECT_EQ(nnz(yf.value()), nnz(yg.value()));
      EXPECT_EQ(to_dense(yf.value()).to(DType::kF64).to_vector<double>(),
                to_dense(yg.value()).to(DType::kF64).to_vector<double>());
      Tensor seed = randn64(x.shape()).to(dtype);
      sum(mul(to_dense(yf), constant(seed))).backward();
      sum(mul(to_dense(yg), constant(seed))).backward();
      EXPECT_EQ(xf.grad().to(DType::kF64).to_vector<double>(), xg.grad().to(DType::kF64).to_vector<double>());
    }
  }
}

// The built-in sparsifiers (registry.h) in sparsified ops: threshold fuses
// into relu_to_csr, n:m into the "nm" format, block magnitude into BSR,
// random with rescale scales values and gradients.
TEST(SparsifiedOp, BuiltinSparsifiers) {
  auto make = [](const char* name, std::map<std::string, SpecValue> params) {
    return make_sparsifier({name, std::move(params)});
  };
  Variable x = param(randn_away({6, 8}, 0.2), "x");
  Variable y = sparsified_relu(stages(make("threshold", {{"threshold", "0.2"}}), "csr", nullptr, "csr")).call({x});
  EXPECT_EQ(y.grad_fn()->name(), "ReluToCsrBackward");
  EXPECT_EQ(nnz(y.value()), static_cast<int64_t>(sum(gt(x.value(), 0.2).to(DType::kF64)).item()));

  V in = {param(randn64({4, 6}), "x"), param(randn64({8, 6}), "w"), param(randn64({8}), "b")};
  ValueSparsity nm = stages(make("nm", {{"n", "2"}, {"m", "4"}}), "nm", nullptr, "nm");
  nm.temporary_format.options = nm.output_format.options = FormatOptions::nm(2, 4);
  check_forward(linear_op(), in, nm);
  EXPECT_EQ(std::string(SparsifiedOp(linear_op(), nm).call(in).value().format()), "nm");

  ValueSparsity block =
      stages(make("block_magnitude", {{"sparsity", "0.5"}, {"block_rows", "2"}}), "bsr", nullptr, "bsr");
  block.temporary_format.options = block.output_format.options = FormatOptions::block(2);
  check_forward(linear_op(), in, block);
  check_backward(linear_op(), in, {{}, block, {}});

  SparsifiedOp dropout([](const V& v) { return mul(v[0], 1.0); },
                       stages(make("random", {{"sparsity", "0.5"}, {"rescale", "true"}}), "dense", nullptr, "dense"));
  SparsifyContext ctx{1, 2, 3, 0};
  Variable d = dropout.call({x}, ctx);
  Tensor kept = ne(d.value(), 0.0);
  expect_close(d.value(), where(kept, mul(x.value(), 2.0), zeros_like(x.value())), "random, rescaled");
  EXPECT_GRADCHECK([&](const V& v) { return dropout.call(v, ctx); }, {x});
}

TEST(SparsifiedOp, RefusesFormatsThatCannotHoldTheStage) {
  SingleOpFn identity = [](const V& in) { return mul(in[0], 1.0); };
  OutputFormat nm24{"nm", FormatOptions::nm(2, 4)};
  auto message = [&](ValueSparsity v, bool grad) {
    try {
      if (grad) {
        SparsifiedOp(identity, ValueSparsity{}, {v});
      } else {
        SparsifiedOp(identity, v);
      }
    } catch (const Error& e) { return std::string(e.what()); }
    return std::string();
  };
  // Magnitude keeps any pattern: "nm" cannot hold it, for an output or a gradient.
  EXPECT_NE(message({top(0.5), nm24, nullptr, {}}, false).find("SparsifiedOp: output 0"), std::string::npos);
  EXPECT_NE(message({nullptr, {}, top(0.5), nm24}, true).find("SparsifiedOp: gradient of input 0"), std::string::npos);
  EXPECT_NE(message({nullptr, {"nonesuch", {}}, nullptr, {}}, false).find("unknown format 'nonesuch'"),
            std::string::npos);
  EXPECT_NE(message({nullptr, {"bsr", {}}, nullptr, {}}, false).find("block shape"), std::string::npos);
  // An n:m inline stage followed by keep-all: "nm" holds it.
  SparsifierPtr nm = make_sparsifier({"nm", {{"n", "2"}, {"m", "4"}}});
  EXPECT_EQ(message({nm, nm24, nullptr, nm24}, false), "");
}

// The example of sparsified_op.h, as written there.
TEST(SparsifiedOp, HeaderExample) {
  SparsifierPtr magnitude_90 = make_sparsifier({"magnitude", {{"sparsity", "0.9"}}});
  SparsifierPtr magnitude_50 = make_sparsifier({"magnitude", {{"sparsity", "0.5"}}});
  SparsifiedOp op([](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); },
                  /*output=*/{nullptr, {}, magnitude_90, {"csr", {}}},         // y: top 10 % in CSR
                  /*input_grads=*/{{}, {nullptr, {}, magnitude_50, {}}, {}});  // dW: top half
  Variable x = param(randn64({8, 10}), "x"), w = param(randn64({5, 10}), "w"), b = param(randn64({5}), "b");
  SparsifyContext ctx;
  Variable y = op.call({x, w, b}, ctx);
  EXPECT_EQ(std::string(y.value().format()), "csr");
  EXPECT_EQ(nnz(y.value()), 4);
  sum(to_dense(y)).backward();
  EXPECT_EQ(static_cast<int64_t>(sum(ne(w.grad(), 0.0).to(DType::kF64)).item()), 25);
}

TEST(SparsifiedOp, Errors) {
  SingleOpFn identity = [](const V& in) { return mul(in[0], 1.0); };
  Variable x = param(randn64({2, 2}), "x");
  // One gradient spec per input, one output spec per output.
  EXPECT_THROW(SparsifiedOp(identity, ValueSparsity{}, {ValueSparsity{}, ValueSparsity{}}).call({x}), Error);
  SparsifiedOp two([](const V& in) { return V{in[0], in[0]}; }, {ValueSparsity{}});
  EXPECT_THROW(two({x}), Error);
  EXPECT_THROW(two.call({x}), Error);
  // A fused forward only for one output.
  EXPECT_THROW(SparsifiedOp([](const V& in) { return in; }, {ValueSparsity{}, ValueSparsity{}}, {}, fused_relu()),
               Error);
  // No rows: still a CSR of shape [0, 3] whose row pointers are [0] (1-D).
  const Tensor none = relu_to_csr(param(randn64({0, 3}))).value();
  EXPECT_EQ(none.shape(), (Shape{0, 3}));
  EXPECT_EQ(csr_impl(none, "test").pointers().shape(), (Shape{1}));
  // relu_to_csr's own limits.
  EXPECT_ERROR_NAMING(relu_to_csr(x, -1.0), "relu_to_csr: the threshold must be >= 0");
  EXPECT_ERROR_NAMING(relu_to_csr(param(randn64({2, 2, 2}))), "relu_to_csr: needs a dense 2-D");
  EXPECT_ERROR_NAMING(relu_to_csr(param(to_format(randn64({2, 2}), "csr"))), "format 'csr'");
  EXPECT_ERROR_NAMING(relu_to_csr(constant(randn64({2, 2}).to(DType::kI32))), "relu_to_csr: needs a dense 2-D");
}

}  // namespace
}  // namespace coppice
