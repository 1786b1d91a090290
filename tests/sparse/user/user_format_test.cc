// A user's format (ELLPACK, tests/sparse/user/ellpack.h) through the
// dispatcher, the format table and autograd.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/reduce.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
#include "tests/sparse/user/ellpack.h"

namespace coppice {
namespace {

using ellpack_test::ellpack;
using ellpack_test::matmul_calls;
using ellpack_test::sddmm_calls;
using ellpack_test::sparse_ellpack;

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
    ASSERT_TRUE(ellpack_test::registered());
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
  EXPECT_THROW(sparse_ellpack(from_vector(std::vector<int32_t>{3, 1}, {1, 2}),
                              from_vector(std::vector<float>{1, 2}, {1, 2}), {1, 4}),
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

TEST_F(UserFormat, IsARowOfTheFormatTable) {
  const FormatSpec* spec = find_format("ellpack");
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->layout, Layout::kCustom);
  const std::vector<std::string> names = format_names();
  EXPECT_EQ(names.back(), "ellpack");  // after the built-in ones
  // Conversions by name, both ways, through its from_mask and the COO path.
  const Tensor w = example();
  const Tensor dense = to_dense(w);
  const Tensor again = to_format(dense, "ellpack");
  EXPECT_EQ(again.format(), "ellpack");
  expect_close(to_dense(again), dense);
  const Tensor csr = to_format(w, "csr");
  EXPECT_EQ(nnz(csr), 7);
  expect_close(to_dense(csr), dense);
  const Tensor back = to_format(csr, "ellpack");
  EXPECT_EQ(nnz(back), 7);
  expect_close(to_dense(back), dense);
  const Tensor big = sparse_from_threshold(dense, 2.0, "ellpack");
  EXPECT_EQ(nnz(big), 3);                                                                 // 3, 2.5 and 4
  EXPECT_THROW(to_format(from_vector(std::vector<float>{1, 2}, {2}), "ellpack"), Error);  // a matrix format
}

TEST_F(UserFormat, SavesAndLoadsByItsParts) {
  const Tensor w = example();
  absl::StatusOr<std::string> bytes = serialize_sparse_safetensors({{"w", w}}, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SparseSafetensorsFile> file = parse_sparse_safetensors(*bytes, "memory");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 1u);
  const Tensor& r = file->tensors[0].second;
  EXPECT_EQ(r.format(), "ellpack");
  EXPECT_EQ(ellpack(r).cols().to_vector<int64_t>(), ellpack(w).cols().to_vector<int64_t>());
  expect_close(to_dense(r), to_dense(w));
}

TEST(FormatTable, RegistrationIsChecked) {
  FormatSpec no_from_mask;
  no_from_mask.name = "half_done";
  EXPECT_THROW(register_format(no_from_mask), Error);
  FormatSpec taken;
  taken.name = "csr";
  taken.from_mask = [](const Tensor& d, const Tensor&, const FormatOptions&, std::string_view) { return d; };
  EXPECT_THROW(register_format(taken), Error);
  EXPECT_EQ(find_format("half_done"), nullptr);
}

}  // namespace
}  // namespace coppice
