// Tests for the sparsifier registry (sparsifiers/registry.h): every built-in
// by name with its parameters and defaults, unknown names and parameters,
// missing and ill-typed ones, and a user-defined sparsifier registered from
// this test (the library never names it) and used like a built-in.
#include "sparsifiers/registry.h"

#include <algorithm>
#include <map>
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
using testing_sparsifiers::throws_with;

SparsifierPtr make(const std::string& name, std::map<std::string, SpecValue> params = {}) {
  return make_sparsifier(SparsifierSpec{name, std::move(params)});
}

TEST(RegistryTest, BuiltinsAreRegistered) {
  const std::vector<std::string> names = registered_sparsifiers();
  for (const char* n : {"block_magnitude", "keep_all", "magnitude", "movement", "nm", "random", "threshold"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    EXPECT_TRUE(is_sparsifier_registered(n));
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_FALSE(is_sparsifier_registered("nope"));
}

TEST(RegistryTest, BuiltinsByName) {
  EXPECT_EQ(make("keep_all")->describe(), "keep_all");
  EXPECT_EQ(make("threshold", {{"threshold", "0.25"}})->describe(), "threshold(threshold=0.25)");
  EXPECT_EQ(make("random", {{"sparsity", "0.5"}})->describe(), "random(sparsity=0.5, rescale=false)");
  EXPECT_EQ(make("random", {{"sparsity", "0.5"}, {"rescale", "True"}})->describe(),
            "random(sparsity=0.5, rescale=true)");
  EXPECT_EQ(make("magnitude", {{"sparsity", "0.9"}})->describe(), "magnitude(sparsity=0.9)");
  EXPECT_EQ(make("block_magnitude", {{"sparsity", "0.5"}, {"block_rows", "4"}})->describe(),
            "block_magnitude(sparsity=0.5, block_rows=4, block_cols=4, norm=l2)");
  EXPECT_EQ(make("block_magnitude", {{"sparsity", "0.5"}, {"block_rows", "4"}, {"block_cols", "8"}, {"norm", "L1"}})
                ->describe(),
            "block_magnitude(sparsity=0.5, block_rows=4, block_cols=8, norm=l1)");
  EXPECT_EQ(make("nm", {{"n", "2"}, {"m", "4"}})->describe(), "nm(n=2, m=4, dim=-1)");
  EXPECT_EQ(make("nm", {{"n", "1"}, {"m", "8"}, {"dim", "0"}})->describe(), "nm(n=1, m=8, dim=0)");
  EXPECT_EQ(make("nm", {{"n", "2"}, {"m", "4"}, {"transposable", "true"}})->describe(),
            "nm(n=2, m=4, dim=-1, transposable)");
  EXPECT_EQ(make("movement", {{"sparsity", "0.3"}})->describe(), "movement(sparsity=0.3)");
  EXPECT_EQ(make("nm", {{"n", "2"}, {"m", "4"}})->kind(), SparsifierKind::kBlocking);
}

TEST(RegistryTest, UnknownName) {
  EXPECT_TRUE(throws_with([] { make("magnitud"); }, {"unknown sparsifier 'magnitud'", "block_magnitude", "keep_all",
                                                     "magnitude", "movement", "nm", "random", "threshold"}));
}

TEST(RegistryTest, BadParameters) {
  EXPECT_TRUE(throws_with([] { make("magnitude"); }, {"'magnitude'", "missing parameter 'sparsity'"}));
  EXPECT_TRUE(throws_with(
      [] {
        make("magnitude", {{"sparsity", "high"}});
      },
      {"'magnitude'", "'sparsity'", "number", "'high'"}));
  EXPECT_TRUE(throws_with([] { make("magnitude", {{"sparsity", "0.5x"}}); }, {"'sparsity'", "'0.5x'"}));
  EXPECT_TRUE(throws_with([] { make("magnitude", {{"sparsity", ""}}); }, {"'sparsity'"}));
  EXPECT_TRUE(throws_with([] { make("magnitude", {{"sparsity", "inf"}}); }, {"'sparsity'", "finite"}));
  EXPECT_TRUE(throws_with(
      [] {
        make("magnitude", {{"sparsity", "0.5"}, {"sparsty", "0.5"}});
      },
      {"'magnitude'", "unknown parameter 'sparsty'", "takes: sparsity"}));
  EXPECT_TRUE(throws_with(
      [] {
        make("keep_all", {{"x", "1"}, {"y", "2"}});
      },
      {"unknown parameters 'x', 'y'", "takes: none"}));
  EXPECT_TRUE(throws_with([] { make("nm", {{"n", "2.5"}, {"m", "4"}}); }, {"'nm'", "'n'", "integer", "'2.5'"}));
  EXPECT_TRUE(throws_with([] { make("nm", {{"n", "2"}}); }, {"'nm'", "missing parameter 'm'"}));
  EXPECT_TRUE(throws_with(
      [] {
        make("random", {{"sparsity", "0.1"}, {"rescale", "maybe"}});
      },
      {"'rescale'", "true or false", "'maybe'"}));
  EXPECT_TRUE(throws_with(
      [] {
        make("block_magnitude", {{"sparsity", "0.1"}, {"block_rows", "2"}, {"norm", "l3"}});
      },
      {"'norm'", "l3"}));
  // Values out of range: the sparsifier's own check, naming it and the value.
  EXPECT_TRUE(throws_with([] { make("magnitude", {{"sparsity", "1.5"}}); }, {"magnitude", "1.5"}));
  EXPECT_TRUE(throws_with([] { make("nm", {{"n", "5"}, {"m", "4"}}); }, {"nm", "n = 5"}));
  EXPECT_TRUE(throws_with([] { make("threshold", {{"threshold", "-1"}}); }, {"threshold", "-1"}));
}

// Typed parameters reach the factories as they are; a string is read as the
// type the factory asks for, as every parameter was before they were typed.
TEST(RegistryTest, TypedParameters) {
  EXPECT_EQ(make("magnitude", {{"sparsity", 0.25}})->describe(), make("magnitude", {{"sparsity", "0.25"}})->describe());
  EXPECT_EQ(make("nm", {{"n", 2}, {"m", 4}, {"transposable", true}})->describe(),
            make("nm", {{"n", "2"}, {"m", "4"}, {"transposable", "yes"}})->describe());
  // An integer is a number; a number is not an integer; a boolean is neither.
  EXPECT_EQ(make("magnitude", {{"sparsity", 0}})->describe(), make("magnitude", {{"sparsity", "0"}})->describe());
  EXPECT_TRUE(throws_with([] { make("nm", {{"n", 2.0}, {"m", 4}}); }, {"'nm'", "'n'", "integer", "'2'"}));
  EXPECT_TRUE(throws_with([] { make("magnitude", {{"sparsity", true}}); }, {"'sparsity'", "number", "'true'"}));
  EXPECT_TRUE(throws_with([] { make("random", {{"sparsity", 0.1}, {"rescale", 2}}); }, {"'rescale'", "'2'"}));
}

TEST(RegistryTest, SpecValueFromText) {
  EXPECT_EQ(SpecValue::from_text("3").kind(), SpecValue::Kind::kInteger);
  EXPECT_EQ(SpecValue::from_text("0.90").kind(), SpecValue::Kind::kNumber);
  EXPECT_EQ(SpecValue::from_text("0.90").text(), "0.90");  // the spelling is kept for describe()
  EXPECT_EQ(SpecValue::from_text("0.90"), SpecValue(0.9));
  EXPECT_EQ(SpecValue::from_text("Yes").kind(), SpecValue::Kind::kBool);
  EXPECT_EQ(SpecValue::from_text("2.5").integer(), std::nullopt);
  EXPECT_EQ(SpecValue::from_text("inf").kind(), SpecValue::Kind::kString);  // not finite: the getter refuses it
  EXPECT_EQ(SpecValue::from_text("l2").kind(), SpecValue::Kind::kString);
  EXPECT_EQ(SpecValue::from_text("1").boolean(), true);
  EXPECT_EQ(SpecValue::from_text("01").boolean(), std::nullopt);
  // A number the library fills in reads back exactly (1 - density as a sparsity).
  EXPECT_EQ(SpecValue(1.0 - 0.3).number(), 1.0 - 0.3);
  EXPECT_EQ(SpecValue(0.1).text(), "0.1");
  EXPECT_EQ(SpecValue(int64_t{4}).text(), "4");
}

// A sparsifier the library does not know: keeps every other element.
class EveryOther : public Sparsifier {
 public:
  explicit EveryOther(int64_t phase) : phase_(phase) {}
  std::string describe() const override { return "every_other(phase=" + std::to_string(phase_) + ")"; }
  SparsifierKind kind() const override { return SparsifierKind::kStreaming; }
  Tensor keep_mask(const Tensor& x, const SparsifyContext&) const override {
    std::vector<float> keep(static_cast<size_t>(x.numel()));
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<int64_t>(i % 2) == phase_ ? 1.0f : 0.0f;
    return from_vector(keep, x.shape()).to(DType::kBool).to(x.device());
  }

 private:
  int64_t phase_;
};

TEST(RegistryTest, UserDefinedSparsifier) {
  if (!is_sparsifier_registered("test_every_other")) {  // (--gtest_repeat runs this again)
    register_sparsifier("test_every_other", [](const SparsifierSpec& spec) -> SparsifierPtr {
      SpecParams p(spec);
      const int64_t phase = p.get_int("phase", 0);
      p.finish();
      return std::make_shared<EveryOther>(phase);
    });
  }
  EXPECT_TRUE(is_sparsifier_registered("test_every_other"));
  SparsifierPtr s = make("test_every_other", {{"phase", "1"}});
  EXPECT_EQ(s->describe(), "every_other(phase=1)");
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(bits(s->keep_mask(x, {})), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  OutputFormat csr;
  csr.name = "csr";
  Tensor y = s->apply(x, csr, {});
  EXPECT_EQ(y.layout(), Layout::kCsr);
  EXPECT_EQ(to_dense(y).to_vector<double>(), (std::vector<double>{0, 2, 0, 4, 0, 6}));
  EXPECT_TRUE(throws_with([] { make("test_every_other", {{"phase", "x"}}); }, {"'test_every_other'", "'phase'"}));
  EXPECT_TRUE(throws_with(
      [] { register_sparsifier("test_every_other", [](const SparsifierSpec&) { return SparsifierPtr(); }); },
      {"'test_every_other' is already registered"}));
  EXPECT_TRUE(throws_with([] { register_sparsifier("", nullptr); }, {"empty"}));
}

}  // namespace
}  // namespace coppice
