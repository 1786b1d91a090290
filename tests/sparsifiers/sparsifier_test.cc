// Tests for the Sparsifier interface's defaults (sparsifiers/sparsifier.h):
// format_mismatch for every format, and apply() into every format that fits
// (dense, coo, csr, csc, bsr, blocked_ell, nm, masked), values scaled, the
// layout and stored pattern right, clear errors naming the sparsifier where
// the format does not fit.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparsifiers/builtin.h"
#include "tensor/ops.h"
#include "tests/sparsifiers/test_util.h"

namespace coppice {
namespace {

using testing_sparsifiers::bits;
using testing_sparsifiers::count;
using testing_sparsifiers::random_tensor;
using testing_sparsifiers::throws_with;

const SparsifyContext kCtx{3, 4, 5, 0};

OutputFormat fmt(const std::string& name, FormatOptions options = {}) {
  OutputFormat f;
  f.name = name;
  f.options = options;
  return f;
}

const std::vector<OutputFormat>& general_formats() {
  static const std::vector<OutputFormat> f = {fmt("dense"),
                                              fmt("coo"),
                                              fmt("csr"),
                                              fmt("csc"),
                                              fmt("bsr", FormatOptions::block(2, 4)),
                                              fmt("blocked_ell", FormatOptions::block(4)),
                                              fmt("masked")};
  return f;
}

std::vector<SparsifierPtr> all_builtins() {
  auto movement = std::make_shared<MovementSparsifier>(0.5);
  movement->accumulate(random_tensor({8, 16}, 1), random_tensor({8, 16}, 2));
  return {std::make_shared<KeepAllSparsifier>(),
          std::make_shared<ThresholdSparsifier>(1.0),
          std::make_shared<RandomFractionSparsifier>(0.5, true),
          std::make_shared<MagnitudeFractionSparsifier>(0.7),
          std::make_shared<BlockMagnitudeSparsifier>(0.5, 2, 4),
          std::make_shared<NmSparsifier>(2, 4),
          movement};
}

TEST(FormatMismatchTest, GeneralFormatsFitEverySparsifier) {
  for (const SparsifierPtr& s : all_builtins()) {
    for (const OutputFormat& f : general_formats()) {
      EXPECT_EQ(s->format_mismatch(f), "") << s->describe() << " -> " << f.name;
    }
  }
}

TEST(FormatMismatchTest, Reasons) {
  MagnitudeFractionSparsifier s(0.5);
  EXPECT_NE(s.format_mismatch(fmt("nm", FormatOptions::nm(2, 4))).find("magnitude(sparsity=0.5)"), std::string::npos);
  EXPECT_NE(s.format_mismatch(fmt("ellpack")).find("unknown format 'ellpack'"), std::string::npos);
  EXPECT_NE(s.format_mismatch(fmt("bsr")).find("block shape"), std::string::npos);
  EXPECT_NE(s.format_mismatch(fmt("blocked_ell", FormatOptions::block(2, 4))).find("square"), std::string::npos);
  EXPECT_NE(s.format_mismatch(fmt("bsr", FormatOptions::block(-1, 2))).find("negative"), std::string::npos);
}

TEST(FormatMismatchTest, NmSparsifierIntoNm) {
  NmSparsifier s(2, 4);
  EXPECT_EQ(s.format_mismatch(fmt("nm", FormatOptions::nm(2, 4))), "");
  EXPECT_EQ(s.format_mismatch(fmt("nm", FormatOptions::nm(3, 4))), "");
  EXPECT_EQ(s.format_mismatch(fmt("nm")), "");  // the sparsifier's own n and m
  const std::string fewer = s.format_mismatch(fmt("nm", FormatOptions::nm(1, 4)));
  EXPECT_NE(fewer.find("nm(n=2, m=4, dim=-1)"), std::string::npos) << fewer;
  EXPECT_NE(fewer.find("n >= 2"), std::string::npos) << fewer;
  EXPECT_NE(s.format_mismatch(fmt("nm", FormatOptions::nm(2, 8))), "");
  EXPECT_NE(NmSparsifier(2, 4, 0).format_mismatch(fmt("nm", FormatOptions::nm(2, 4))).find("last dim"),
            std::string::npos);
  EXPECT_NE(NmSparsifier(1, 2).format_mismatch(fmt("nm", FormatOptions::nm(2, 4))), "");
}

// apply(x, f) holds exactly where(keep_mask, x * scale, 0), in format f.
void expect_apply(const Sparsifier& s, const Tensor& x, const OutputFormat& f) {
  SCOPED_TRACE(s.describe() + " -> " + f.name);
  Tensor y = s.apply(x, f, kCtx);
  EXPECT_EQ(std::string(y.format()), f.name);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.dtype(), x.dtype());
  Tensor mask = s.keep_mask(x, kCtx);
  Tensor want = where(mask, mul(x, s.value_scale()), zeros({}, x.options()));
  EXPECT_TRUE(allclose(to_dense(y), want, 1e-6, 0)) << max_abs_diff(to_dense(y), want);
  if (f.name == "coo" || f.name == "csr" || f.name == "csc") { EXPECT_EQ(nnz(y), count(mask)); }
}

TEST(ApplyTest, EveryBuiltinIntoEveryGeneralFormat) {
  Tensor x = random_tensor({8, 16}, 9);
  for (const SparsifierPtr& s : all_builtins()) {
    for (const OutputFormat& f : general_formats()) expect_apply(*s, x, f);
  }
}

TEST(ApplyTest, NmIntoNm) {
  Tensor x = random_tensor({8, 16}, 10);
  for (OutputFormat f : {fmt("nm"), fmt("nm", FormatOptions::nm(2, 4)), fmt("nm", FormatOptions::nm(3, 4))}) {
    expect_apply(NmSparsifier(2, 4), x, f);
    const NmImpl& impl = nm_impl(NmSparsifier(2, 4).apply(x, f, kCtx), "test");
    EXPECT_EQ(impl.m(), 4);
    EXPECT_EQ(impl.n(), f.options.n == 0 ? 2 : f.options.n);
  }
}

TEST(ApplyTest, BlockMagnitudeIntoBsrStoresExactlyTheKeptBlocks) {
  Tensor x = random_tensor({16, 32}, 11);
  BlockMagnitudeSparsifier s(0.75, 4, 8);
  Tensor y = s.apply(x, fmt("bsr", FormatOptions::block(4, 8)), kCtx);
  EXPECT_EQ(nnz(y), kept_count(0.75, 16) * 32);
}

TEST(ApplyTest, SparseInputGoesThroughItsDenseForm) {
  Tensor x = random_tensor({8, 16}, 12);
  Tensor csr = to_format(x, "csr");
  MagnitudeFractionSparsifier s(0.5);
  EXPECT_TRUE(allclose(to_dense(s.apply(csr, fmt("coo"), kCtx)), s.apply(x, fmt("dense"), kCtx)));
}

TEST(ApplyTest, FormatsThatDoNotFitThrowNamingTheSparsifier) {
  Tensor x = random_tensor({8, 16}, 13);
  MagnitudeFractionSparsifier s(0.5);
  EXPECT_TRUE(
      throws_with([&] { s.apply(x, fmt("nm", FormatOptions::nm(2, 4)), kCtx); }, {"magnitude(sparsity=0.5)", "'nm'"}));
  EXPECT_TRUE(throws_with([&] { s.apply(x, fmt("ellpack"), kCtx); }, {"magnitude(sparsity=0.5)", "ellpack"}));
  EXPECT_TRUE(throws_with([&] { s.apply(x, fmt("bsr"), kCtx); }, {"magnitude(sparsity=0.5)", "block shape"}));
  EXPECT_TRUE(throws_with([&] { s.apply(x, fmt("bsr", FormatOptions::block(3, 3)), kCtx); },
                          {"magnitude(sparsity=0.5)", "bsr"}));
  EXPECT_TRUE(throws_with(
      [&] {
        s.apply(random_tensor({2, 4, 4}, 1), fmt("csr"), kCtx);
      },
      {"magnitude(sparsity=0.5)", "csr", "2-D"}));
  EXPECT_TRUE(throws_with([&] { NmSparsifier(1, 4).apply(x, fmt("nm", FormatOptions::nm(1, 8)), kCtx); },
                          {"nm(n=1, m=4", "m = 8"}));
}

TEST(ApplyTest, RescaledRandomIntoCsr) {
  Tensor x = random_tensor({32, 32}, 14);
  RandomFractionSparsifier s(0.5, true);
  Tensor y = s.apply(x, fmt("csr"), kCtx);
  Tensor mask = s.keep_mask(x, kCtx);
  EXPECT_EQ(nnz(y), count(mask));
  EXPECT_TRUE(allclose(to_dense(y), where(mask, mul(x, 2.0), zeros({}, x.options()))));
  // The fused dense path draws the same mask.
  EXPECT_EQ(bits(ne(s.apply(x, fmt("dense"), kCtx), 0.0)), bits(mask));
}

}  // namespace
}  // namespace coppice
