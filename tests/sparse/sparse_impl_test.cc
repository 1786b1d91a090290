// Tests for sparse/sparse_impl.h: nnz, density and pattern versions on every
// format, printing, moves, and the dense fallback that every format's
// registered to_dense enables in the dispatcher.
#include "sparse/sparse_impl.h"

#include <string>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "tensor/dispatcher.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;

constexpr const char* kSparseFormats[] = {"coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};

// A [4, 8] matrix that fits 2:4, 2x2 blocks and 2x2 Blocked-ELL.
Tensor example_dense() {
  return f32({1, 0, 2, 0, 0, 0, 0, 3,  //
              0, 0, 0, 0, 0, 0, 0, 0,  //
              0, 4, 0, 0, 5, 0, 6, 0,  //
              0, 0, 0, 0, 0, 0, 0, 0},
             {4, 8});
}

TEST(SparseImplTest, DenseCountsEveryElement) {
  Tensor x = example_dense();
  EXPECT_EQ(nnz(x), 32);
  EXPECT_DOUBLE_EQ(density(x), 1.0);
  EXPECT_EQ(pattern_version(x), 0u);
  EXPECT_TRUE(values(x).is_same(x));
  EXPECT_TRUE(to_dense(x).is_same(x));
  EXPECT_DOUBLE_EQ(density(zeros({0, 3})), 1.0);
  EXPECT_ERROR_NAMING(sparse_impl(x, "my_op"), "my_op: expected a sparse tensor, got format 'dense'");
  EXPECT_ERROR_NAMING(with_values(x, zeros({2})),
                      "with_values: dense values of shape [2] for a tensor of shape [4, 8]");
}

TEST(SparseImplTest, NnzAndDensityPerFormat) {
  const FormatOptions options{2, 2, 2, 4};
  const std::map<std::string, int64_t> expected = {{"coo", 6},          {"csr", 6}, {"csc", 6},   {"bsr", 24},
                                                   {"blocked_ell", 24}, {"nm", 16}, {"masked", 6}};
  for (const char* f : kSparseFormats) {
    Tensor t = to_format(example_dense(), f, options);
    EXPECT_EQ(t.format(), f);
    EXPECT_EQ(nnz(t), expected.at(f)) << f;
    EXPECT_DOUBLE_EQ(density(t), static_cast<double>(expected.at(f)) / 32.0) << f;
  }
}

TEST(SparseImplTest, PatternVersions) {
  const FormatOptions options{2, 2, 2, 4};
  for (const char* f : kSparseFormats) {
    Tensor a = to_format(example_dense(), f, options);
    Tensor b = to_format(example_dense(), f, options);
    EXPECT_NE(pattern_version(a), 0u) << f;
    EXPECT_NE(pattern_version(a), pattern_version(b)) << f << ": new parts get a fresh version";
    Tensor doubled = with_values(a, values(a) * 2.0);
    EXPECT_EQ(pattern_version(doubled), pattern_version(a)) << f << ": with_values keeps it";
    EXPECT_TRUE(exact_equal(to_dense(doubled), example_dense() * 2.0)) << f;
    EXPECT_EQ(pattern_version(to_dtype(a, DType::kF64)), pattern_version(a)) << f << ": a dtype change keeps it";
    EXPECT_TRUE(to_format(a, f, options).is_same(a)) << f << ": same format and options is the tensor itself";
    // A conversion away and back builds new parts.
    const char* other = std::string(f) == "coo" ? "csr" : "coo";
    EXPECT_NE(pattern_version(to_format(to_format(a, other, options), f, options)), pattern_version(a)) << f;
  }
}

TEST(SparseImplTest, ToStringShowsPartsOfSmallTensors) {
  Tensor a = to_format(example_dense(), "csr");
  std::string s = to_string(a);
  EXPECT_NE(s.find("tensor(format=csr, shape=[4, 8], dtype=f32, device=cpu, nnz=6, density=0.1875, pattern_version="),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("\n  crow_indices: tensor([0, 3, 3, 6, 6], dtype=i32"), std::string::npos) << s;
  EXPECT_NE(s.find("\n  col_indices: tensor([0, 2, 7, 1, 4, 6]"), std::string::npos) << s;
  EXPECT_NE(s.find("\n  values: tensor([1"), std::string::npos) << s;
  std::string b = to_string(to_format(example_dense(), "bsr", FormatOptions::block(2, 4)));
  EXPECT_NE(b.find("block=2x4"), std::string::npos) << b;
  EXPECT_NE(to_string(to_format(example_dense(), "nm")).find("m=4, n=2"), std::string::npos);
  std::string big = to_string(to_format(ones({20, 20}), "coo"));
  EXPECT_NE(big.find("indices: i64 [2, 400] (not shown: more than 64 elements)"), std::string::npos) << big;
  EXPECT_EQ(to_string(example_dense()), example_dense().to_string());
}

TEST(SparseImplTest, EveryFormatFallsBackToDenseThroughTheDispatcher) {
  Dispatcher& d = Dispatcher::instance();
  d.reset_fallback_counts();
  const FormatOptions options{2, 2, 2, 4};
  for (const char* f : kSparseFormats) {
    Tensor t = to_format(example_dense(), f, options);
    Tensor out = dispatch("neg", {t})[0];
    EXPECT_TRUE(out.is_dense());
    EXPECT_TRUE(exact_equal(out, neg(example_dense()))) << f;
    EXPECT_EQ(d.fallback_counts().at(std::string("neg(") + f + ")"), 1) << f;
  }
  d.set_fallback_is_error(true);
  EXPECT_ERROR_NAMING(dispatch("neg", {to_format(example_dense(), "csr")}),
                      "neg: no kernel for neg(csr) on cpu, and dense fallbacks are errors");
  d.set_fallback_is_error(false);
  d.reset_fallback_counts();
}

TEST(SparseImplTest, MovesKeepVersion) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  const FormatOptions options{2, 2, 2, 4};
  for (const char* f : kSparseFormats) {
    Tensor a = to_format(example_dense(), f, options);
    Tensor g = to_device(a, Device::cuda());
    EXPECT_EQ(g.device(), Device::cuda()) << f;
    for (const auto& [name, part] : sparse_impl(g, "test").parts()) EXPECT_EQ(part.device(), Device::cuda()) << name;
    EXPECT_EQ(pattern_version(g), pattern_version(a)) << f;
    Tensor back = to_device(g, Device::cpu());
    EXPECT_TRUE(testing::same_parts(back, a)) << f;
    EXPECT_TRUE(exact_equal(to_dense(g).to(Device::cpu()), example_dense())) << f;
  }
}

}  // namespace
}  // namespace coppice
