// Tests for tensor/dispatcher.cc: attributes, kernel lookup by (op, device,
// formats), the counted dense fallback for a format registered here (a fake
// sparse format that wraps a dense tensor), the switch that makes fallbacks
// errors, and the fused-kernel hook of the composite ops.
#include "tensor/dispatcher.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

// A stand-in for a sparse format: it only holds a dense tensor, under a
// format name the dispatcher has never heard of.
class FakeSparseImpl final : public TensorImpl {
 public:
  explicit FakeSparseImpl(Tensor dense, std::string format = "fake_sparse", Device device = Device::cpu())
      : TensorImpl(dense.shape(), dense.dtype(), device), dense_(std::move(dense)), format_(std::move(format)) {}
  Layout layout() const override { return Layout::kCustom; }
  std::string_view format() const override { return format_; }
  const Tensor& dense() const { return dense_; }

 private:
  Tensor dense_;
  std::string format_;
};

Tensor fake_sparse(const Tensor& dense, std::string format = "fake_sparse", Device device = Device::cpu()) {
  return Tensor(std::make_shared<FakeSparseImpl>(dense, std::move(format), device));
}

// Test ops with names no real kernel uses, declared as a user's ops are
// (tensor/op_table.h). Each dense kernel doubles its input and counts its calls.
int dense_calls = 0;
int sparse_calls = 0;

bool register_fakes() {
  declare_op(OpSpec("test_double").inputs(1).sparse({0}));
  declare_op(OpSpec("test_pair").inputs(2).sparse({1}));
  declare_op(OpSpec("test_any").inputs(2).attr("bonus", AttrType::kDouble).sparse({0, 1}));
  Dispatcher& d = Dispatcher::instance();
  d.register_to_dense("fake_sparse", [](const Tensor& t) { return t.impl_as<FakeSparseImpl>()->dense(); });
  d.register_kernel("test_double", DeviceType::kCpu, {"dense"},
                    [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                      ++dense_calls;
                      return {mul(in[0], 2.0)};
                    });
  d.register_kernel("test_double", DeviceType::kCpu, {"fake_sparse_native"},
                    [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                      ++sparse_calls;
                      return {mul(in[0].impl_as<FakeSparseImpl>()->dense(), 2.0)};
                    });
  d.register_kernel("test_pair", DeviceType::kCpu, {"dense", "none"},
                    [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> { return {in[0]}; });
  d.register_kernel(
      "test_pair", DeviceType::kCpu, {"dense", "dense"},
      [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> { return {add(in[0], in[1])}; });
  d.register_kernel("test_any", DeviceType::kCpu, {"*", "*"},
                    [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                      return {full({}, static_cast<double>(in.size()) + attrs.get_double("bonus", 0.0))};
                    });
  return true;
}
const bool registered = register_fakes();

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registered);
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(false);
    dense_calls = sparse_calls = 0;
  }
  void TearDown() override {
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(false);
  }
};

TEST(Attrs, TypedGettersAndConversions) {
  Attrs a;
  a.set("i", int64_t{3})
      .set("d", 2.5)
      .set("b", true)
      .set("s", std::string("mean"))
      .set("v", std::vector<int64_t>{1, 2});
  EXPECT_TRUE(a.has("i"));
  EXPECT_FALSE(a.has("missing"));
  EXPECT_EQ(a.get_int("i"), 3);
  EXPECT_EQ(a.get_double("i"), 3.0);  // ints convert
  EXPECT_EQ(a.get_double("d"), 2.5);
  EXPECT_TRUE(a.get_bool("b"));
  EXPECT_EQ(a.get_int("b"), 1);
  EXPECT_EQ(a.get_string("s"), "mean");
  EXPECT_EQ(a.get_ints("v"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.get_int("missing", 7), 7);
  EXPECT_EQ(a.get_double("missing", 0.5), 0.5);
  EXPECT_FALSE(a.get_bool("missing", false));
  EXPECT_ERROR_NAMING(a.get_int("missing"), "attribute 'missing' is missing");
  EXPECT_ERROR_NAMING(a.get_int("d"), "attribute 'd' is not an integer");
  EXPECT_ERROR_NAMING(a.get_string("i"), "attribute 'i' is not a string");
  EXPECT_ERROR_NAMING(a.get_ints("s"), "attribute 's' is not a list of integers");
  EXPECT_ERROR_NAMING(a.get_double("s"), "attribute 's' is not a number");
  a.set("i", 9.0);  // set replaces
  EXPECT_EQ(a.get_double("i"), 9.0);
}

TEST_F(DispatcherTest, FindsKernelsByOpDeviceAndFormats) {
  Dispatcher& d = Dispatcher::instance();
  EXPECT_TRUE(d.has_kernel("test_double", DeviceType::kCpu));
  EXPECT_FALSE(d.has_kernel("test_double", DeviceType::kCuda));
  EXPECT_FALSE(d.has_kernel("no_such_op", DeviceType::kCpu));
  EXPECT_NE(d.find("test_double", DeviceType::kCpu, {"dense"}), nullptr);
  EXPECT_EQ(d.find("test_double", DeviceType::kCpu, {"csr"}), nullptr);
  EXPECT_NE(d.find("test_any", DeviceType::kCpu, {"csr", "dense"}), nullptr);  // "*" matches any
  // The primitives of kernels.h are registered for the CPU.
  for (const char* op : {op::kFill, op::kCopy, "add", "exp", op::kWhere}) {
    EXPECT_TRUE(d.has_kernel(op, DeviceType::kCpu)) << op;
  }

  Tensor x = from_vector<float>({1, 2});
  EXPECT_EQ(dispatch("test_double", {x})[0].to_vector<double>(), (std::vector<double>{2, 4}));
  EXPECT_EQ(dense_calls, 1);
  // Optional inputs: an undefined tensor matches "none".
  EXPECT_TRUE(dispatch("test_pair", {x, Tensor()})[0].is_same(x));
  EXPECT_EQ(dispatch("test_pair", {x, x})[0].to_vector<double>(), (std::vector<double>{2, 4}));
  Attrs attrs;
  attrs.set("bonus", 0.5);
  EXPECT_EQ(dispatch("test_any", {x, fake_sparse(x)}, attrs)[0].item(), 2.5);
  EXPECT_TRUE(d.fallback_counts().empty());
}

TEST_F(DispatcherTest, MissingKernelsAreErrorsNamingTheOp) {
  Tensor x = zeros({2});
  EXPECT_ERROR_NAMING(dispatch("no_such_op", {x}), "no_such_op: no kernel registered for (dense) on cpu");
  EXPECT_ERROR_NAMING(dispatch("no_such_op", {x}), "'no_such_op' is not a declared op");
  EXPECT_ERROR_NAMING(dispatch("test_double", {Tensor()}), "test_double: called with no defined input");
  EXPECT_ERROR_NAMING(dispatch("test_pair", {x, fake_sparse(x, "unknown_format")}),
                      "test_pair: format 'unknown_format' has no conversion to dense");
  EXPECT_ERROR_NAMING(dispatch("test_pair", {x, fake_sparse(x, "fake_sparse", Device::cuda(0))}),
                      "test_pair: input 1 is on cuda:0 but an earlier input is on cpu");
}

TEST_F(DispatcherTest, SparseInputWithoutKernelFallsBackToDenseAndIsCounted) {
  Dispatcher& d = Dispatcher::instance();
  Tensor x = from_vector<float>({1, 2, 3});
  Tensor s = fake_sparse(x);
  EXPECT_TRUE(s.is_sparse());
  EXPECT_EQ(s.format(), "fake_sparse");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dispatch("test_double", {s})[0].to_vector<double>(), (std::vector<double>{2, 4, 6}));
  }
  EXPECT_EQ(dense_calls, 3);
  EXPECT_EQ(d.fallback_counts(), (std::map<std::string, int64_t>{{"test_double(fake_sparse)", 3}}));
  // Mixed inputs: only the sparse one converts; the key names both formats.
  dispatch("test_pair", {x, s});
  EXPECT_EQ(d.fallback_counts().at("test_pair(dense, fake_sparse)"), 1);
  d.reset_fallback_counts();
  EXPECT_TRUE(d.fallback_counts().empty());
}

TEST_F(DispatcherTest, FallbackCanBeMadeAnError) {
  Dispatcher& d = Dispatcher::instance();
  Tensor s = fake_sparse(from_vector<float>({1}));
  d.set_fallback_is_error(true);
  EXPECT_TRUE(d.fallback_is_error());
  EXPECT_ERROR_NAMING(dispatch("test_double", {s}),
                      "test_double: no kernel for test_double(fake_sparse) on cpu, and dense fallbacks are errors");
  EXPECT_EQ(dense_calls, 0);
  EXPECT_TRUE(d.fallback_counts().empty());
  // Dense inputs are not fallbacks, and a kernel for the format itself is not either.
  EXPECT_NO_THROW(dispatch("test_double", {from_vector<float>({1})}));
  EXPECT_NO_THROW(dispatch("test_double", {fake_sparse(from_vector<float>({1}), "fake_sparse_native")}));
  EXPECT_EQ(sparse_calls, 1);
  d.set_fallback_is_error(false);
  EXPECT_NO_THROW(dispatch("test_double", {s}));
  EXPECT_EQ(d.fallback_counts().at("test_double(fake_sparse)"), 1);
}

// Frontends with sparse support (add, matmul, sum, ...) hand sparse operands
// to the dispatcher, which falls back to dense for a format with no kernel and
// counts it; dense-only frontends refuse them, naming the op and the format.
TEST_F(DispatcherTest, FrontendsRouteSparseOperandsOrRejectThem) {
  Tensor x = from_vector<float>({1, 2});
  Tensor s = fake_sparse(x);
  EXPECT_EQ(add(x, s).to_vector<double>(), (std::vector<double>{2, 4}));
  EXPECT_EQ(sum(s).item(), 3.0);
  auto counts = Dispatcher::instance().fallback_counts();
  EXPECT_EQ(counts["add(dense, fake_sparse)"], 1);
  EXPECT_EQ(counts["sum(fake_sparse)"], 1);
  EXPECT_ERROR_NAMING(matmul(s, x), "matmul: with a sparse operand");
  EXPECT_ERROR_NAMING(softmax(s, 0), "softmax: input must be dense");
  EXPECT_ERROR_NAMING(cat({x, s}), "cat: tensor 1 must be dense");
  EXPECT_ERROR_NAMING(s.strides(), "strides: needs a dense tensor, got format 'fake_sparse'");
  EXPECT_EQ(s.to_string(), "tensor(format=fake_sparse, shape=[2], dtype=f32, device=cpu)");
}

// Registered last in this binary: from here on the CPU has a "fused" log_softmax.
TEST_F(DispatcherTest, CompositeOpsCallAFusedKernelWhenTheDeviceHasOne) {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor composite = log_softmax(x, 1);
  // Static: the kernel outlives this test.
  static int fused_calls = 0;
  static int64_t seen_dim = -1;
  Dispatcher::instance().register_kernel(op::kLogSoftmax, DeviceType::kCpu, {"dense"},
                                         [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                                           ++fused_calls;
                                           seen_dim = attrs.get_int("dim");
                                           return {zeros_like(in[0])};
                                         });
  Tensor fused = log_softmax(x, -1);
  EXPECT_EQ(fused_calls, 1);
  EXPECT_EQ(seen_dim, 1);  // normalized
  EXPECT_EQ(fused.to_vector<double>(), (std::vector<double>(4, 0.0)));
  EXPECT_GT(max_abs_diff(composite, fused), 0.1);
  // Validation still happens first.
  EXPECT_ERROR_NAMING(log_softmax(x, 2), "log_softmax: dim 2 is out of range");
  EXPECT_EQ(fused_calls, 1);
  // Other composites are untouched.
  EXPECT_LT(max_abs_diff(sum(softmax(x, 1), {1}), ones({2})), 1e-6);
}

}  // namespace
}  // namespace coppice
