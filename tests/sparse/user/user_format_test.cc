// ELLPACK, defined and registered here (outside the core): every row stores k
// slots, cols i32 [rows, k] (-1 = padding, stored columns strictly increasing
// then padding) and values [rows, k].
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/reduce.h"
#include "gtest/gtest.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

class EllpackImpl : public SparseImpl {
 public:
  EllpackImpl(Tensor cols, Tensor values, Shape shape, uint64_t version)
      : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
        cols_(std::move(cols)),
        values_(std::move(values)) {}
  Layout layout() const override { return Layout::kCustom; }
  std::string_view format() const override { return "ellpack"; }
  int64_t nnz() const override {
    int64_t n = 0;
    for (int64_t c : cols_.to_vector<int64_t>()) n += c >= 0;
    return n;
  }
  const Tensor& values() const override { return values_; }
  SparseParts parts() const override { return {{"cols", cols_}, {"values", values_}}; }
  std::map<std::string, std::string> attributes() const override { return {{"k", std::to_string(k())}}; }
  Tensor with_values(const Tensor& values) const override {
    COPPICE_CHECK(values.shape() == values_.shape(), "ellpack.with_values: wrong shape");
    return Tensor(std::make_shared<EllpackImpl>(cols_, values.contiguous(), shape(), pattern_version()));
  }
  Tensor to_dense() const override {
    const int64_t rows = shape()[0], ncols = shape()[1];
    std::vector<double> d(static_cast<size_t>(rows * ncols), 0.0);
    const auto c = cols_.to_vector<int64_t>();
    const auto v = values_.to_vector<double>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t s = 0; s < k(); ++s) {
        const int64_t col = c[static_cast<size_t>(r * k() + s)];
        if (col >= 0) d[static_cast<size_t>(r * ncols + col)] += v[static_cast<size_t>(r * k() + s)];
      }
    }
    return from_vector(d, shape(), TensorOptions(DType::kF64)).to(dtype());
  }
  Tensor to(TensorOptions options) const override {
    COPPICE_CHECK(options.device.type == DeviceType::kCpu, "ellpack: CPU only");
    return Tensor(std::make_shared<EllpackImpl>(cols_, values_.to(options.dtype), shape(), pattern_version()));
  }
  const Tensor& cols() const { return cols_; }
  int64_t k() const { return cols_.size(1); }

 private:
  Tensor cols_, values_;
};

// The validating factory.
Tensor sparse_ellpack(const Tensor& cols, const Tensor& values, const Shape& shape) {
  COPPICE_CHECK(shape.size() == 2 && cols.dim() == 2 && values.shape() == cols.shape() && cols.size(0) == shape[0],
                "sparse_ellpack: bad part shapes");
  const auto c = cols.to_vector<int64_t>();
  const int64_t k = cols.size(1);
  for (int64_t r = 0; r < shape[0]; ++r) {
    int64_t prev = -1;
    bool pad = false;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) {
        COPPICE_CHECK(col == -1, "sparse_ellpack: cols[", r, ", ", s, "] = ", col);
        pad = true;
        continue;
      }
      COPPICE_CHECK(!pad && col > prev && col < shape[1], "sparse_ellpack: cols[", r, ", ", s, "] = ", col);
      prev = col;
    }
  }
  return Tensor(std::make_shared<EllpackImpl>(cols.to(DType::kI32).contiguous(), values.contiguous(), shape,
                                              new_pattern_version()));
}

const EllpackImpl& ellpack(const Tensor& t) { return dynamic_cast<const EllpackImpl&>(*t.impl()); }

std::atomic<int> matmul_calls{0}, sddmm_calls{0};

// out[r, :] = sum_s values[r, s] * b[cols[r, s], :]
std::vector<Tensor> ellpack_matmul(const std::vector<Tensor>& in, const Attrs&) {
  const EllpackImpl& a = ellpack(in[0]);
  const Tensor& b = in[1];
  ++matmul_calls;
  const int64_t rows = a.shape()[0], k = a.k(), n = b.size(1);
  const auto c = a.cols().to_vector<int64_t>();
  const auto v = a.values().to_vector<double>();
  const auto bv = b.contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) continue;
      const double w = v[static_cast<size_t>(r * k + s)];
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(r * n + j)] += w * bv[static_cast<size_t>(col * n + j)];
    }
  }
  return {from_vector(out, {rows, n}, TensorOptions(DType::kF64)).to(a.dtype())};
}

// (x @ y) at the pattern's stored slots; padding slots get 0.
std::vector<Tensor> ellpack_sddmm(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& y = in[1];
  const EllpackImpl& p = ellpack(in[2]);
  ++sddmm_calls;
  const int64_t rows = p.shape()[0], k = p.k(), inner = x.size(1), n = y.size(1);
  const auto c = p.cols().to_vector<int64_t>();
  const auto xv = x.contiguous().to_vector<double>();
  const auto yv = y.contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(rows * k), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) continue;
      double acc = 0;
      for (int64_t i = 0; i < inner; ++i) {
        acc += xv[static_cast<size_t>(r * inner + i)] * yv[static_cast<size_t>(i * n + col)];
      }
      out[static_cast<size_t>(r * k + s)] = acc;
    }
  }
  return {p.with_values(from_vector(out, {rows, k}, TensorOptions(DType::kF64)).to(p.dtype()))};
}

const bool registered = [] {
  Dispatcher& d = Dispatcher::instance();
  d.register_to_dense("ellpack", [](const Tensor& t) { return ellpack(t).to_dense(); });
  d.register_kernel("matmul", DeviceType::kCpu, {"ellpack", "dense"}, ellpack_matmul);
  d.register_kernel("sddmm", DeviceType::kCpu, {"dense", "dense", "ellpack"}, ellpack_sddmm);
  return true;
}();

// 4 x 6, k = 3, with a padded row and an empty row.
Tensor example() {
  const std::vector<int32_t> cols = {0, 2, 5, 1, -1, -1, -1, -1, -1, 0, 3, 4};
  const std::vector<float> vals = {1.5f, -2.f, 0.5f, 3.f, 9.f, 9.f, 7.f, 7.f, 7.f, -1.f, 2.5f, 4.f};
  return sparse_ellpack(from_vector(cols, {4, 3}), from_vector(vals, {4, 3}), {4, 6});
}

Tensor dense_x() {
  std::vector<float> v(6 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
  return from_vector(v, {6, 5});
}

void expect_close(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-5) << "element " << i;
}

class UserFormat : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registered);
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(false);
  }
  void TearDown() override { Dispatcher::instance().set_fallback_is_error(false); }
};

TEST_F(UserFormat, IsASparseTensor) {
  const Tensor w = example();
  EXPECT_TRUE(w.is_sparse());
  EXPECT_EQ(w.format(), "ellpack");
  EXPECT_EQ(nnz(w), 7);
  EXPECT_THROW(sparse_ellpack(from_vector(std::vector<int32_t>{3, 1}, {1, 2}), from_vector(std::vector<float>{1, 2}, {1, 2}),
                              {1, 4}),
               Error);
}

TEST_F(UserFormat, MatmulUsesTheRegisteredKernel) {
  const Tensor w = example(), x = dense_x();
  const int before = matmul_calls;
  const Tensor y = matmul(w, x);
  EXPECT_EQ(matmul_calls, before + 1);
  EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
  expect_close(y, matmul(to_dense(w), x));
}

TEST_F(UserFormat, SddmmUsesTheRegisteredKernel) {
  const Tensor w = example();
  std::vector<float> bv(5 * 6);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.2f * static_cast<float>(static_cast<int>(i % 5) - 2);
  const Tensor a = from_vector(bv, {5, 6});
  std::vector<float> av(4 * 5);
  for (size_t i = 0; i < av.size(); ++i) av[i] = 0.1f * static_cast<float>(i);
  const Tensor lhs = from_vector(av, {4, 5});
  const int before = sddmm_calls;
  const Tensor s = sddmm(lhs, a, w);
  EXPECT_EQ(sddmm_calls, before + 1);
  EXPECT_EQ(s.format(), "ellpack");
  EXPECT_EQ(pattern_version(s), pattern_version(w));
  EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
  const Tensor full = matmul(lhs, a);
  const auto f = full.to_vector<double>();
  const auto c = ellpack(w).cols().to_vector<int64_t>();
  const auto sv = values(s).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    const double expected = c[i] < 0 ? 0.0 : f[(i / 3) * 6 + static_cast<size_t>(c[i])];
    EXPECT_NEAR(sv[i], expected, 1e-5) << "slot " << i;
  }
}

TEST_F(UserFormat, OpWithoutKernelFallsBackCounted) {
  const Tensor w = example();
  const Tensor d = dense_x();
  const Tensor ones = from_vector(std::vector<float>(24, 1.f), {4, 6});
  // Through the dispatcher (the frontends dispatch a user-defined format only
  // to a registered kernel; the dispatcher itself falls back for any format
  // with a registered to_dense).
  const Tensor y = dispatch("add", {w, ones})[0];
  expect_close(y, add(to_dense(w), ones));
  const auto counts = Dispatcher::instance().fallback_counts();
  int64_t total = 0;
  for (const auto& [key, n] : counts) {
    if (key.find("ellpack") != std::string::npos) total += n;
  }
  EXPECT_GE(total, 1);
  (void)d;
}

TEST_F(UserFormat, FallbackCanBeAnError) {
  const Tensor w = example();
  const Tensor ones = from_vector(std::vector<float>(24, 1.f), {4, 6});
  Dispatcher::instance().set_fallback_is_error(true);
  EXPECT_THROW(dispatch("add", {w, ones}), Error);
  EXPECT_NO_THROW(matmul(w, dense_x()));  // has a kernel
}

TEST_F(UserFormat, GradientFlowsThroughSddmm) {
  const Tensor w = example(), x = dense_x();
  Variable W(w, /*requires_grad=*/true, "W");
  Variable X(x);
  const int before = sddmm_calls;
  Variable loss = sum(matmul(W, X));
  loss.backward();
  EXPECT_GT(sddmm_calls, before);
  const Tensor& g = W.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.format(), "ellpack");
  EXPECT_EQ(pattern_version(g), pattern_version(w));

  Variable Wd(to_dense(w), /*requires_grad=*/true, "Wd");
  Variable lossd = sum(matmul(Wd, X));
  lossd.backward();
  expect_close(loss.value(), lossd.value());
  const auto gd = Wd.grad().to_vector<double>();
  const auto c = ellpack(w).cols().to_vector<int64_t>();
  const auto gv = values(g).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i] < 0) continue;
    EXPECT_NEAR(gv[i], gd[(i / 3) * 6 + static_cast<size_t>(c[i])], 1e-5) << "slot " << i;
  }
  for (const auto& [key, n] : Dispatcher::instance().fallback_counts()) {
    EXPECT_EQ(key.find("ellpack"), std::string::npos) << "fallback " << key << " x" << n;
  }
}

}  // namespace
}  // namespace coppice
