// Sparsity schedules (sparsifiers/schedule.h, sparsity_builder.h,
// apply_schedule.h) on a LeNet-300-100-like model: the builder fills the
// plain schedule one to one; rules select the right parameters (exact names,
// whole-name regexes, exact over regex); parameters come back sparsified in
// their formats; modules find their output rules and the rule works as a
// sparsified op; and every bad rule is refused with one line naming it.
#include "sparsifiers/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/apply_schedule.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using V = std::vector<Variable>;
using testing::error_of;

SparsifierSpec magnitude(const char* sparsity) { return {"magnitude", {{"sparsity", sparsity}}}; }

// fc1 784 -> 300, fc2 300 -> 100, fc3 100 -> 10.
NamedParameters lenet() {
  Generator gen(99);
  NamedParameters p;
  const std::vector<std::pair<int64_t, int64_t>> layers = {{300, 784}, {100, 300}, {10, 100}};
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string fc = str_cat("fc", i + 1);
    p.emplace_back(fc + ".weight", Variable(randn({layers[i].first, layers[i].second}, DType::kF32, gen), true));
    p.emplace_back(fc + ".bias", Variable(randn({layers[i].first}, DType::kF32, gen), true));
  }
  return p;
}

const std::vector<std::string> kModules = {"fc1", "fc2", "fc3"};

int64_t nonzeros(const Tensor& t) { return static_cast<int64_t>(sum(ne(to_dense(t), 0.0).to(DType::kF64)).item()); }

TEST(SparsityBuilder, FillsTheScheduleOneToOne) {
  SparsityBuilder b;
  b["fc1.weight"].format("csr").sparsify(magnitude("0.9"));
  b.regex("fc[23]\\.weight").density(0.2).format("bsr", FormatOptions::block(2));
  b.output("fc1").forward({"threshold", {{"threshold", "0"}}}, "csr").backward({}).backward(magnitude("0.5"), "dense");
  b.output_regex("fc[23]").forward(StageSpec{std::nullopt, {"coo", {}}, SparsifierSpec{"magnitude", {}}, {}});
  const SparsitySchedule& s = b.schedule();

  ASSERT_EQ(s.parameters.size(), 2u);
  EXPECT_EQ(s.parameters[0].selector.kind, Selector::Kind::kExact);
  EXPECT_EQ(s.parameters[0].selector.pattern, "fc1.weight");
  EXPECT_EQ(s.parameters[0].format.name, "csr");
  ASSERT_TRUE(s.parameters[0].sparsifier.has_value());
  EXPECT_EQ(describe(*s.parameters[0].sparsifier), "magnitude(sparsity=0.9)");
  EXPECT_FALSE(s.parameters[0].density.has_value());
  EXPECT_EQ(s.parameters[1].selector.kind, Selector::Kind::kRegex);
  EXPECT_EQ(s.parameters[1].density, 0.2);
  EXPECT_EQ(s.parameters[1].format.options.block_rows, 2);
  EXPECT_FALSE(s.parameters[1].sparsifier.has_value());

  ASSERT_EQ(s.outputs.size(), 2u);
  ASSERT_EQ(s.outputs[0].forward.size(), 1u);
  EXPECT_EQ(s.outputs[0].forward[0].inline_sparsifier->name, "threshold");
  EXPECT_EQ(s.outputs[0].forward[0].temporary_format.name, "csr");
  EXPECT_EQ(s.outputs[0].forward[0].output_format.name, "csr");
  EXPECT_FALSE(s.outputs[0].forward[0].external_sparsifier.has_value());
  ASSERT_EQ(s.outputs[0].backward.size(), 2u);
  EXPECT_FALSE(s.outputs[0].backward[0].inline_sparsifier.has_value());
  EXPECT_EQ(s.outputs[0].backward[1].inline_sparsifier->name, "magnitude");
  EXPECT_EQ(s.outputs[1].selector.kind, Selector::Kind::kRegex);
  EXPECT_EQ(s.outputs[1].forward[0].external_sparsifier->name, "magnitude");

  EXPECT_TRUE(Selector::regex("fc[0-9]+\\.weight").matches("fc12.weight"));
  EXPECT_FALSE(Selector::regex("fc[0-9]+").matches("fc1.weight"));  // whole-name match
  EXPECT_TRUE(Selector::exact("fc1").matches("fc1"));
  EXPECT_THROW(Selector::regex("fc[").matches("fc1"), Error);
}

TEST(ApplySchedule, SparsifiesTheSelectedParameters) {
  SparsityBuilder b;
  b["fc1.weight"].format("csr").sparsify(magnitude("0.9"));
  b.regex("fc[23]\\.weight").density(0.2);
  NamedParameters params = lenet();
  AppliedSchedule applied = apply_schedule(b.schedule(), params, kModules);

  ASSERT_EQ(applied.parameters().size(), params.size());
  const ScheduledParameter& fc1 = applied.parameter("fc1.weight");
  EXPECT_EQ(fc1.rule, 0u);
  EXPECT_EQ(std::string(fc1.value.value().format()), "csr");
  EXPECT_EQ(nnz(fc1.value.value()), kept_count(0.9, 300 * 784));
  EXPECT_TRUE(fc1.value.requires_grad());
  EXPECT_EQ(fc1.value.name(), "fc1.weight");
  // The kept entries are the largest: every kept |w| >= every dropped |w|.
  Tensor w = params[0].second.value();
  Tensor kept = ne(to_dense(fc1.value.value()), 0.0);
  EXPECT_GE(min(where(kept, abs(w), full_like(w, 1e9))).item(), max(where(kept, zeros_like(w), abs(w))).item());

  for (const char* name : {"fc2.weight", "fc3.weight"}) {
    const ScheduledParameter& p = applied.parameter(name);
    EXPECT_EQ(p.rule, 1u) << name;
    EXPECT_EQ(p.density, 0.2) << name;
    ASSERT_NE(p.sparsifier, nullptr);
    EXPECT_EQ(p.sparsifier->describe().rfind("magnitude", 0), 0u) << p.sparsifier->describe();
    EXPECT_TRUE(p.value.value().is_dense()) << name;
    EXPECT_EQ(nonzeros(p.value.value()), kept_count(0.8, p.value.numel())) << name;
  }
  for (const char* name : {"fc1.bias", "fc2.bias", "fc3.bias"}) {
    const ScheduledParameter& p = applied.parameter(name);
    EXPECT_FALSE(p.rule.has_value()) << name;
    EXPECT_EQ(p.sparsifier, nullptr);
  }
  EXPECT_TRUE(applied.parameter("fc1.bias").value.is_same(params[1].second));  // untouched
  EXPECT_THROW(applied.parameter("fc9.weight"), Error);
  EXPECT_EQ(applied.output_rule("fc1"), nullptr);  // no output rules
}

// A density for a block format keeps whole blocks (block_magnitude): an
// element mask would touch nearly every block and the format would store
// them all.
TEST(ApplySchedule, DensityOfABlockFormatKeepsWholeBlocks) {
  SparsityBuilder b;
  b["fc2.weight"].density(0.25).format("bsr", FormatOptions::block(4));         // [100, 300]
  b["fc3.weight"].density(0.5).format("blocked_ell", FormatOptions::block(2));  // [10, 100]
  b["fc1.weight"].density(0.25).format("bsr", FormatOptions::block(4, 2));      // [300, 784]
  NamedParameters params = lenet();
  AppliedSchedule applied = apply_schedule(b.schedule(), params, kModules);
  const ScheduledParameter& fc2 = applied.parameter("fc2.weight");
  EXPECT_EQ(fc2.sparsifier->describe().rfind("block_magnitude", 0), 0u) << fc2.sparsifier->describe();
  EXPECT_EQ(std::string(fc2.value.value().format()), "bsr");
  EXPECT_EQ(nnz(fc2.value.value()), kept_count(0.75, (100 / 4) * (300 / 4)) * 16);
  const ScheduledParameter& fc1 = applied.parameter("fc1.weight");
  EXPECT_EQ(nnz(fc1.value.value()), kept_count(0.75, (300 / 4) * (784 / 2)) * 8);
  const ScheduledParameter& fc3 = applied.parameter("fc3.weight");
  EXPECT_EQ(nonzeros(fc3.value.value()), kept_count(0.5, (10 / 2) * (100 / 2)) * 4);
}

// Block-ness is the format table's to say (a row whose options have a block
// shape), not a list of names: a user's format registered with block options
// keeps whole blocks from a density just as bsr does, and one without keeps
// entries. Both rows build BSR tensors; only their options differ.
TEST(ApplySchedule, BlockFormatsAreThoseTheTableGivesABlockShape) {
  auto row = [](const char* name, FormatOptionKind options) {
    FormatSpec spec;
    spec.name = name;
    spec.rank = FormatRank::kMatrix;
    spec.options = options;
    spec.from_mask = [](const Tensor& d, const Tensor& m, const FormatOptions& o, std::string_view) {
      return sparse_from_mask(d, m, "bsr", o.block_rows > 0 ? o : FormatOptions::block(1));
    };
    return spec;
  };
  if (find_format("test_tiles") == nullptr) register_format(row("test_tiles", FormatOptionKind::kBlock));
  if (find_format("test_flat") == nullptr) register_format(row("test_flat", FormatOptionKind::kNone));
  EXPECT_TRUE(is_block_format("test_tiles"));
  EXPECT_FALSE(is_block_format("test_flat"));
  EXPECT_TRUE(is_block_format("bsr") && is_block_format("blocked_ell"));
  EXPECT_FALSE(is_block_format("csr") || is_block_format("nm") || is_block_format("no_such_format"));
  const std::vector<std::string> blocks = block_format_names();
  EXPECT_NE(std::find(blocks.begin(), blocks.end(), "test_tiles"), blocks.end());
  EXPECT_EQ(std::find(blocks.begin(), blocks.end(), "test_flat"), blocks.end());

  SparsityBuilder b;
  b["fc2.weight"].density(0.25).format("test_tiles", FormatOptions::block(4));  // [100, 300]
  b["fc3.weight"].density(0.5).format("test_flat");                             // [10, 100]
  NamedParameters params = lenet();
  AppliedSchedule applied = apply_schedule(b.schedule(), params, kModules);
  const ScheduledParameter& fc2 = applied.parameter("fc2.weight");
  EXPECT_EQ(fc2.sparsifier->describe().rfind("block_magnitude", 0), 0u) << fc2.sparsifier->describe();
  EXPECT_EQ(nnz(fc2.value.value()), kept_count(0.75, (100 / 4) * (300 / 4)) * 16);
  const ScheduledParameter& fc3 = applied.parameter("fc3.weight");
  EXPECT_EQ(fc3.sparsifier->describe().rfind("magnitude", 0), 0u) << fc3.sparsifier->describe();
}

// An exact rule wins over regex rules; rules of one kind that agree may overlap.
TEST(ApplySchedule, Precedence) {
  SparsityBuilder b;
  b.regex("fc[0-9]\\.weight").density(0.5);
  b.regex("fc[12]\\.weight").density(0.5);  // overlaps, same settings
  b["fc1.weight"].format("coo");            // fc1.weight: only converted
  b.regex(".*\\.bias").format("dense");
  const NamedParameters params = lenet();
  AppliedSchedule applied = apply_schedule(b.schedule(), params, kModules);
  EXPECT_EQ(applied.parameter("fc1.weight").rule, 2u);
  EXPECT_EQ(std::string(applied.parameter("fc1.weight").value.value().format()), "coo");
  EXPECT_EQ(applied.parameter("fc1.weight").sparsifier, nullptr);
  EXPECT_EQ(applied.parameter("fc2.weight").rule, 0u);  // the first of two that agree
  EXPECT_EQ(applied.parameter("fc3.weight").rule, 0u);
  for (const char* bias : {"fc1.bias", "fc2.bias", "fc3.bias"}) EXPECT_EQ(applied.parameter(bias).rule, 3u);
  // A dense rule without a sparsifier changes nothing: the same Variable.
  EXPECT_TRUE(applied.parameter("fc2.bias").value.is_same(params[3].second));
}

TEST(ApplySchedule, OutputRulesWorkAsSparsifiedOps) {
  SparsityBuilder b;
  b.output("fc1").forward({"threshold", {{"threshold", "0"}}}, "csr").backward({}).backward(magnitude("0.5"), "dense");
  b.output_regex("fc[23]").forward(magnitude("0.5"), "dense");
  AppliedSchedule applied = apply_schedule(b.schedule(), lenet(), kModules);
  const OutputSparsity* fc1 = applied.output_rule("fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->rule, 0u);
  ASSERT_EQ(fc1->forward.size(), 1u);
  ASSERT_EQ(fc1->backward.size(), 2u);
  EXPECT_EQ(fc1->forward[0].inline_sparsifier->describe(), "threshold(threshold=0)");
  EXPECT_EQ(applied.output_rule("fc3")->rule, 1u);
  EXPECT_EQ(applied.output_rule("fc4"), nullptr);
  // Each module has its own sparsifier instances (stateful ones keep state per module).
  EXPECT_NE(applied.output_rule("fc2")->forward[0].inline_sparsifier,
            applied.output_rule("fc3")->forward[0].inline_sparsifier);

  // fc1 at forward time: relu-like output in CSR, the weight's gradient cut to its top half.
  Generator gen(5);
  Variable x(randn({4, 6}, DType::kF64, gen));
  Variable w(randn({5, 6}, DType::kF64, gen), true, "w");
  SparsifiedOp op = fc1->sparsified([](const V& in) { return V{linear(in[0], in[1])}; });
  Variable y = op.call({x, w});
  EXPECT_EQ(std::string(y.value().format()), "csr");
  Tensor dense_y = matmul(x.value(), w.value().t());
  EXPECT_EQ(nnz(y.value()), nonzeros(gt(abs(dense_y), 0.0).to(DType::kF64)));
  sum(to_dense(y)).backward();
  EXPECT_EQ(nonzeros(w.grad()), kept_count(0.5, w.numel()));
}

// Each bad rule is refused, before any tensor is touched, by one line that names it.
TEST(ApplySchedule, RefusesBadRules) {
  struct Case {
    const char* what;
    SparsitySchedule schedule;
    const char* expected;  // part of the message
  };
  auto with = [](auto fill) {
    SparsityBuilder b;
    fill(b);
    return b.schedule();
  };
  const std::vector<Case> cases = {
      {"exact name that matches nothing", with([](SparsityBuilder& b) { b["fc4.weight"].density(0.5); }),
       "parameter rule 0 ('fc4.weight') selects no parameter"},
      {"regex that matches nothing (whole-name)", with([](SparsityBuilder& b) { b.regex("fc1").density(0.5); }),
       "parameter rule 0 (regex 'fc1') selects no parameter"},
      {"regex that does not parse", with([](SparsityBuilder& b) { b.regex("fc[").density(0.5); }),
       "parameter rule 0 (regex 'fc['): the regex does not parse: missing ]: ["},
      {"regex too long", with([](SparsityBuilder& b) { b.regex(std::string(1001, 'f')).density(0.5); }),
       "(1001 bytes)'): the regex is 1001 bytes long, over the limit of 1000 bytes"},
      {"output regex with lookahead", with([](SparsityBuilder& b) { b.output_regex("fc(?=1)."); }),
       "output rule 0 (regex 'fc(?=1).'): the regex does not parse: invalid perl operator: (?= (RE2 syntax: no "
       "backreferences or lookaround)"},
      {"two rules with conflicting settings", with([](SparsityBuilder& b) {
         b.regex("fc.*weight").density(0.5);
         b.regex("fc1\\..*").density(0.3);
       }),
       "'fc1.weight' is selected by parameter rule 0 (regex 'fc.*weight') and parameter rule 1 (regex 'fc1\\..*')"},
      {"two exact rules that conflict", with([](SparsityBuilder& b) {
         b["fc1.weight"].format("csr");
         b["fc1.weight"].format("coo");
       }),
       "parameter rule 0 ('fc1.weight') and parameter rule 1 ('fc1.weight')"},
      {"format that cannot hold the output", with([](SparsityBuilder& b) {
         b["fc1.weight"].sparsify(magnitude("0.5")).format("nm", FormatOptions::nm(2, 4));
       }),
       "parameter rule 0 ('fc1.weight'): format 'nm(2:4)' cannot hold what magnitude"},
      {"block format without a block", with([](SparsityBuilder& b) { b["fc1.weight"].format("bsr"); }),
       "parameter rule 0 ('fc1.weight'): format 'bsr' cannot hold"},
      {"unknown format", with([](SparsityBuilder& b) { b["fc1.weight"].format("ellpack2"); }),
       "parameter rule 0 ('fc1.weight'): format 'ellpack2'"},
      {"density zero", with([](SparsityBuilder& b) { b["fc1.weight"].density(0.0); }),
       "parameter rule 0 ('fc1.weight'): density 0 is outside (0, 1]"},
      {"density above one", with([](SparsityBuilder& b) { b["fc1.weight"].density(1.5); }),
       "parameter rule 0 ('fc1.weight'): density 1.5 is outside (0, 1]"},
      {"density against the sparsifier",
       with([](SparsityBuilder& b) { b["fc1.weight"].density(0.5).sparsify(magnitude("0.9")); }),
       "parameter rule 0 ('fc1.weight'): density 0.5 contradicts magnitude(sparsity=0.9)"},
      {"unknown sparsifier", with([](SparsityBuilder& b) {
         b.regex("fc[0-9]\\.weight").sparsify({"nonesuch", {}});
       }),
       "parameter rule 0 (regex 'fc[0-9]\\.weight'): make_sparsifier: unknown sparsifier 'nonesuch'"},
      {"bad sparsifier parameter", with([](SparsityBuilder& b) { b["fc1.weight"].sparsify(magnitude("lots")); }),
       "parameter rule 0 ('fc1.weight')"},
      {"output rule for no module", with([](SparsityBuilder& b) { b.output("fc9").forward(magnitude("0.5"), "csr"); }),
       "output rule 0 ('fc9') selects no module (modules: fc1, fc2, fc3)"},
      {"output rule with an unknown backward sparsifier", with([](SparsityBuilder& b) {
         b.output("fc1").backward({}).backward({"nonesuch", {}}, "dense");
       }),
       "output rule 0 ('fc1'), backward input 1, inline: make_sparsifier: unknown sparsifier 'nonesuch'"},
      {"output stage format mismatch", with([](SparsityBuilder& b) {
         b.output("fc1").forward(StageSpec{std::nullopt, {}, magnitude("0.5"), {"nm", FormatOptions::nm(2, 4)}});
       }),
       "output rule 0 ('fc1'), forward output 0, output format: format 'nm(2:4)' cannot hold"},
      {"conflicting output rules", with([](SparsityBuilder& b) {
         b.output_regex("fc.").forward(magnitude("0.5"), "csr");
         b.output_regex("fc[12]").forward(magnitude("0.5"), "coo");
       }),
       "module 'fc1' is selected by output rule 0 (regex 'fc.') and output rule 1 (regex 'fc[12]')"},
  };
  const NamedParameters params = lenet();
  for (const Case& c : cases) {
    const std::string message = error_of([&] { apply_schedule(c.schedule, params, kModules); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << ": got '" << message << "'";
    EXPECT_EQ(message.rfind("sparsity schedule: ", 0), 0u) << c.what << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what << ": not one line";
    // check_schedule finds the same without tensors.
    std::vector<std::string> names;
    for (const auto& p : params) names.push_back(p.first);
    EXPECT_EQ(error_of([&] { check_schedule(c.schedule, names, kModules); }), message) << c.what;
  }
}

// The same schedule and context give the same masks (every rank agrees);
// parameters draw from different streams.
TEST(ApplySchedule, RandomSparsifiersAreKeyedByName) {
  SparsityBuilder b;
  b.regex("fc[12]\\.bias").sparsify({"random", {{"sparsity", "0.5"}}});
  NamedParameters params = lenet();
  params[3].second =
      Variable(params[1].second.value().narrow(0, 0, 100).clone(), true);  // same values as fc1.bias[:100]
  SparsifyContext ctx{11, 0, 3, 0};
  AppliedSchedule a1 = apply_schedule(b.schedule(), params, kModules, ctx);
  AppliedSchedule a2 = apply_schedule(b.schedule(), params, kModules, ctx);
  Tensor m1 = ne(a1.parameter("fc1.bias").value.value(), 0.0);
  EXPECT_EQ(m1.to_vector<bool>(), ne(a2.parameter("fc1.bias").value.value(), 0.0).to_vector<bool>());
  Tensor m2 = ne(a1.parameter("fc2.bias").value.value(), 0.0);
  EXPECT_NE(m1.narrow(0, 0, 100).contiguous().to_vector<bool>(), m2.to_vector<bool>());
}

}  // namespace
}  // namespace coppice
