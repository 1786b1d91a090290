// Formats declared by their levels in the format table (level_impl.h): each
// kind of declaration (ELL, a hybrid with COO inside BSR blocks, CSR with
// i64 indices, BSR with rectangular dense blocks, n:m) converts by name,
// runs the products, SDDMM and elementwise ops on the family's generic
// kernels without a dense fallback, has float64 gradients through a linear
// layer, saves and loads, and gives mask updates its positions and unit.
#include <algorithm>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/linalg.h"
#include "autograd/gradcheck.h"
#include "gtest/gtest.h"
#include "optim/mask_change.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_impl.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/dispatcher.h"
#include "tensor/op_profile.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tensor/runtime_options.h"
#include "tests/sparse/test_util.h"

namespace coppice::levels {
namespace {

struct Declared {
  std::string name, declaration;
  Shape shape;
};

// Each kind of level once; shapes that the blocks and groups divide.
const std::vector<Declared>& declared() {
  static const std::vector<Declared> d = [] {
    std::vector<Declared> v = {
        {"test_ell", "(dense, ranged)", {6, 10}},
        {"test_bsr_of_coo", "blocked 2x2 (dense(0), compressed(1), compressed(2, non-unique), singleton(3))", {6, 8}},
        {"test_csr_i64", "(dense, compressed) index i64", {7, 9}},
        {"test_bsr_2x3", "blocked 2x3 (dense(0), compressed(1), dense(2), dense(3))", {6, 12}},
        {"test_rows_2_4", "(dense, n_out_of_m(1, 2:4))", {5, 8}},
    };
    for (const Declared& f : v) register_level_format(f.name, parse_level_format(f.declaration, "test"), "test");
    return v;
  }();
  return d;
}

// Values in +-[0.5, 1.5) and a mask the format can hold: n:m keeps two of
// every four, the 2x3-block format whole blocks, the others single entries;
// row 1 is empty (all zeros) in every kind.
std::pair<Tensor, Tensor> operand(const Declared& f, uint64_t seed) {
  const int64_t rows = f.shape[0], cols = f.shape[1];
  std::vector<double> v(static_cast<size_t>(rows * cols));
  std::vector<bool> keep(v.size());
  uint64_t s = seed * 2654435761u + 1;
  auto next = [&] { return (s = s * 6364136223846793005u + 1442695040888963407u) >> 33; };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<size_t>(r * cols + c);
      v[i] = ((next() & 1) != 0 ? -1.0 : 1.0) * (0.5 + static_cast<double>(next() % 1000) / 1000.0);
      if (f.name == "test_rows_2_4") {
        keep[i] = (c + r) % 4 < 2;
      } else if (f.name == "test_bsr_2x3") {
        keep[i] = ((r / 2) * 5 + (c / 3) * 3) % 4 == 0;
      } else {
        keep[i] = next() % 3 == 0;
      }
      if (r == 1 && f.name != "test_rows_2_4") keep[i] = false;
    }
  }
  std::vector<double> masked(v.size());
  for (size_t i = 0; i < v.size(); ++i) masked[i] = keep[i] ? v[i] : 0.0;
  std::vector<uint8_t> m(keep.begin(), keep.end());
  return {from_vector(masked, f.shape, TensorOptions(DType::kF64)), ne(from_vector(m, f.shape), 0.0)};
}

Tensor declared_tensor(const Declared& f, uint64_t seed) {
  const auto [dense, mask] = operand(f, seed);
  return sparse_from_mask(dense, mask, f.name);
}

using testing::same_parts;
using testing::throws_with;

void expect_close(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> va = to_dense(a).to_vector<double>(), vb = to_dense(b).to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-12) << "element " << i;
}

Tensor dense_of(const Shape& shape, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05 * static_cast<double>((i * 7 + seed) % 23) - 0.5;
  return from_vector(v, shape, TensorOptions(DType::kF64));
}

class LevelFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(declared().size(), 5u);
    Dispatcher::instance().reset_fallback_counts();
    Dispatcher::instance().set_fallback_is_error(true);  // the family's kernels serve every op below
  }
  void TearDown() override { Dispatcher::instance().set_fallback_is_error(false); }
};

TEST_F(LevelFormats, AreRowsOfTheFormatTable) {
  for (const Declared& f : declared()) {
    SCOPED_TRACE(f.name);
    const FormatSpec* spec = find_format(f.name);
    ASSERT_NE(spec, nullptr);
    EXPECT_EQ(spec->layout, Layout::kCustom);
    EXPECT_TRUE(knows_stored_positions(*spec));
    EXPECT_EQ(is_mask_changing_format(*spec), f.name != "test_rows_2_4");  // n:m's groups do not hold any pattern
    EXPECT_TRUE(same_levels(*registered_level_format(f.name), parse_level_format(f.declaration, "test")));
    const auto [dense, mask] = operand(f, 3);
    const Tensor t = sparse_from_mask(dense, mask, f.name);
    EXPECT_EQ(t.format(), f.name);
    EXPECT_EQ(t.impl()->kernel_family(), kLevelFamily);
    EXPECT_EQ(sparse_impl(t, "test").attributes().at("levels"), describe(*registered_level_format(f.name)));
    EXPECT_EQ(to_dense(t).to_vector<double>(), dense.to_vector<double>());
    // Through a built-in format and back, by name: the entries survive.
    const Tensor csr = to_format(t, "csr");
    EXPECT_EQ(to_dense(csr).to_vector<double>(), dense.to_vector<double>());
    const Tensor back = to_format(csr, f.name);
    EXPECT_EQ(back.format(), f.name);
    EXPECT_EQ(to_dense(back).to_vector<double>(), dense.to_vector<double>());
    EXPECT_EQ(nnz(to_format(t, "coo")), nnz(t));  // explicit zeros (whole blocks, n:m groups) kept
  }
}

TEST_F(LevelFormats, RegistrationIsIdempotentAndChecked) {
  const Declared& ell = declared()[0];
  const size_t rows = format_names().size();
  EXPECT_NO_THROW(register_level_format(ell.name, parse_level_format(ell.declaration, "t"), "again"));
  EXPECT_EQ(format_names().size(), rows);
  EXPECT_TRUE(
      throws_with([&] { register_level_format(ell.name, parse_level_format("(dense, compressed)", "t"), "declare"); },
                  {"declare: format 'test_ell' is already declared as (dense(0), ranged(1))",
                   "cannot be declared again as (dense(0), compressed(1))"}));
  EXPECT_TRUE(throws_with([&] { register_level_format("csr", parse_level_format("(dense, compressed)", "t"), "d"); },
                          {"d: format 'csr' is already registered", "choose another name"}));
  EXPECT_TRUE(throws_with(
      [&] { register_level_format("odd", parse_level_format("blocked 2x2 (dense, compressed, dense)", "t"), "d"); },
      {"d: format 'odd'", "two levels per dimension"}));
  EXPECT_TRUE(throws_with([&] { register_level_format("lonely", parse_level_format("(dense, singleton)", "t"), "d"); },
                          {"d: format 'lonely'", "level 1 (singleton(1))", "must follow a non-unique"}));
  EXPECT_EQ(find_format("odd"), nullptr);
  EXPECT_EQ(find_format("lonely"), nullptr);
}

// Every pair of formats, built-in and declared (user, hybrid, n:m inside
// blocks), converts by name with the dense values kept: random patterns
// that every format can hold (2:4 along rows, so n:m formats hold them),
// with an empty block row, empty 2x4 blocks and, in n:m's groups, stored
// zeros.
TEST_F(LevelFormats, EveryPairOfFormatsConvertsByName) {
  Dispatcher::instance().set_fallback_is_error(false);  // conversions are not ops
  register_level_format("test_ell_of_coo",
                        parse_level_format("blocked 2x2 (dense, ranged, compressed(non-unique), singleton)", "t"), "t");
  register_level_format("test_bsr_of_2_4",
                        parse_level_format("blocked 2x4 (dense, compressed, dense, n_out_of_m(3, 2:4))", "t"), "t");
  register_level_format("test_csc_levels", parse_level_format("(dense(1), compressed(0))", "t"), "t");
  struct Target {
    std::string name;
    FormatOptions options;
  };
  std::vector<Target> formats = {{"csr", {}},
                                 {"csc", {}},
                                 {"coo", {}},
                                 {"bsr", FormatOptions::block(2, 2)},
                                 {"blocked_ell", FormatOptions::block(2)},
                                 {"nm", FormatOptions::nm(2, 4)},
                                 {"masked", {}}};
  for (const Declared& f : declared()) formats.push_back({f.name, {}});
  for (const char* name : {"test_ell_of_coo", "test_bsr_of_2_4", "test_csc_levels"}) formats.push_back({name, {}});
  const Shape shape = {8, 24};  // what every declared block and group divides
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)), 0.0);
    uint64_t s = seed;
    auto next = [&] { return (s = s * 6364136223846793005u + 1442695040888963407u) >> 33; };
    for (int64_t r = 0; r < shape[0]; ++r) {
      for (int64_t g = 0; g < shape[1] / 4; ++g) {
        const bool empty_block = r / 2 == 1 || next() % 4 == 0;  // block row 1, and a quarter of the 2x4 blocks
        const int64_t first = static_cast<int64_t>(next() % 4), second = (first + 1 + next() % 3) % 4;
        for (int64_t c : {first, second}) {
          if (!empty_block)
            v[static_cast<size_t>(r * shape[1] + g * 4 + c)] = 0.5 + static_cast<double>(next() % 100) / 50;
        }
      }
    }
    const Tensor dense = from_vector(v, shape, TensorOptions(DType::kF64));
    for (const Target& from : formats) {
      SCOPED_TRACE(from.name);
      Tensor src;
      try {
        src = to_format(dense, from.name, from.options);
      } catch (const Error& e) {
        ADD_FAILURE() << "to_format(dense, " << from.name << "): " << e.what();
        continue;
      }
      EXPECT_EQ(to_dense(src).to_vector<double>(), v);
      // Conversions to a declared format keep every stored entry: a source
      // that stores whole blocks (their zeros too) may store more than 2 of
      // some 4, which a declared n:m target refuses, naming the group. (The
      // built-in nm keeps such a source's non-zeros.)
      std::vector<int64_t> per_group(static_cast<size_t>(shape_numel(shape) / 4), 0);
      for (int64_t p : stored_positions(src)) {
        if (p >= 0) ++per_group[static_cast<size_t>(p / 4)];
      }
      const bool fits_2_4 = *std::max_element(per_group.begin(), per_group.end()) <= 2;
      for (const Target& to : formats) {
        SCOPED_TRACE(to.name);
        if (!format_spec(to.name, "t").holds_any_pattern && !fits_2_4 && to.name != "nm") {
          EXPECT_TRUE(throws_with([&] { to_format(src, to.name, to.options); }, {"more than", "2"}));
          continue;
        }
        try {
          EXPECT_EQ(to_dense(to_format(src, to.name, to.options)).to_vector<double>(), v);
        } catch (const Error& e) { ADD_FAILURE() << e.what(); }
      }
    }
  }
}

TEST_F(LevelFormats, ProductsAndSddmmRunOnTheFamilysKernels) {
  for (const Declared& f : declared()) {
    SCOPED_TRACE(f.name);
    const Tensor w = declared_tensor(f, 5);
    const Tensor wd = to_dense(w);
    const int64_t rows = f.shape[0], cols = f.shape[1];
    const Tensor b = dense_of({cols, 3}, 1), x = dense_of({4, cols}, 2), left = dense_of({4, rows}, 3);
    expect_close(matmul(w, b), matmul(wd, b));
    expect_close(matmul(left, w), matmul(left, wd));
    expect_close(linear(x, w), linear(x, wd));
    const Tensor a = dense_of({rows, 5}, 4), c = dense_of({5, cols}, 6);
    const Tensor s = sddmm(a, c, w);
    EXPECT_EQ(s.format(), f.name);
    EXPECT_EQ(pattern_version(s), pattern_version(w));
    const Tensor mask = ne(to_dense(with_values(w, ones_like(values(w)))), 0.0);
    expect_close(to_dense(s), where(mask, matmul(a, c), zeros_like(wd)));
    const Tensor row = dense_of({1, cols}, 10);
    expect_close(mul(w, row), mul(wd, row));
    expect_close(add(w, wd), mul(wd, 2.0));
    expect_close(sum(w), sum(wd));
  }
  EXPECT_TRUE(Dispatcher::instance().fallback_counts().empty());
}

// A declaration whose levels are a built-in format's runs on that format's
// kernel (the dispatcher's profile shows the built-in cell under the
// family's); one that differs only in its index dtype runs on the generic
// kernel, with the same result.
TEST_F(LevelFormats, ABuiltInFormatsDeclarationRunsOnItsKernel) {
  register_level_format("test_csr_levels", parse_level_format("(dense, compressed)", "t"), "t");
  const Declared& csr_i64 = declared()[2];
  const Tensor w = declared_tensor(csr_i64, 17);
  const Tensor same = to_format(w, "test_csr_levels");
  const Tensor b = dense_of({csr_i64.shape[1], 4}, 18);
  const ScopedRuntimeOptions profiled([](RuntimeOptions& o) { o.profile = ProfileMode::kOn; });
  const int64_t before = op_profile_calls(op::kMatmul);
  const Tensor routed = matmul(same, b);
  EXPECT_EQ(op_profile_calls(op::kMatmul), before + 2);  // the family's cell, then CSR's
  EXPECT_NE(op_profile_report().find("matmul(csr, dense) on cpu"), std::string::npos) << op_profile_report();
  const Tensor generic = matmul(w, b);
  EXPECT_EQ(op_profile_calls(op::kMatmul), before + 3);  // the family's cell alone
  EXPECT_TRUE(testing::exact_equal(routed, generic));
  // A result in the operand's pattern comes back in its format and version.
  const Tensor a = dense_of({csr_i64.shape[0], 3}, 19), c = dense_of({3, csr_i64.shape[1]}, 20);
  const Tensor s = sddmm(a, c, same);
  EXPECT_EQ(s.format(), "test_csr_levels");
  EXPECT_EQ(pattern_version(s), pattern_version(same));
  expect_close(s, sddmm(a, c, w));
  EXPECT_EQ(builtin_format_of(parse_level_format("blocked 4x4 (dense, ranged, dense, dense)", "t"), {8, 8}),
            "blocked_ell");
  EXPECT_EQ(builtin_format_of(parse_level_format("blocked 4x4 (dense, ranged, compressed, dense)", "t"), {8, 8}),
            std::nullopt);
}

TEST_F(LevelFormats, LinearGradientsPassGradcheck) {
  for (const Declared& f : declared()) {
    SCOPED_TRACE(f.name);
    const Tensor w = declared_tensor(f, 7);
    const Variable W(w, true, "W"), X(dense_of({3, f.shape[1]}, 8), true, "x"), B(dense_of({f.shape[0]}, 9), true, "b");
    const GradcheckResult r =
        gradcheck([](const std::vector<Variable>& v) { return linear(v[0], v[1], v[2]); }, {X, W, B});
    EXPECT_TRUE(r.passed) << r.message;
    Variable loss = sum(linear(X, W, B));
    loss.backward();
    EXPECT_EQ(W.grad().format(), f.name);
    EXPECT_EQ(pattern_version(W.grad()), pattern_version(w));
  }
}

TEST_F(LevelFormats, SaveAndLoadByTheirLevelParts) {
  for (const Declared& f : declared()) {
    SCOPED_TRACE(f.name);
    const Tensor w = declared_tensor(f, 11);
    absl::StatusOr<std::string> bytes = serialize_sparse_safetensors({{"w", w}}, {});
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<SparseSafetensorsFile> file = parse_sparse_safetensors(*bytes, "memory");
    ASSERT_TRUE(file.ok()) << file.status();
    const Tensor& r = file->tensors.at(0).second;
    EXPECT_EQ(r.format(), f.name);
    EXPECT_TRUE(same_parts(r, w));
  }
}

TEST_F(LevelFormats, MaskUpdatesReadTheirPositionsAndUnit) {
  const Declared& blocks = declared()[3];
  const Tensor wb = declared_tensor(blocks, 13);
  const PatternView vb = pattern_view(wb, "test");
  EXPECT_EQ(vb.block_rows, 2);
  EXPECT_EQ(vb.block_cols, 3);
  const Declared& hybrid = declared()[1];
  const Tensor wh = declared_tensor(hybrid, 13);
  const PatternView vh = pattern_view(wh, "test");
  EXPECT_EQ(vh.block_rows, 1);  // COO inside the block: entries come and go alone
  EXPECT_EQ(vh.nnz(), nnz(wh));
  // Drop the first stored entry, grow the first free one: survivors keep their values.
  std::vector<int64_t> kept(vh.positions.begin() + 1, vh.positions.end());
  int64_t free = 0;
  while (std::binary_search(vh.positions.begin(), vh.positions.end(), free)) ++free;
  const MaskChange change = rebuild_pattern(wh, vh, kept, {free}, {}, "test");
  EXPECT_EQ(change.param.format(), hybrid.name);
  EXPECT_EQ(nnz(change.param), nnz(wh));
  const std::vector<double> before = to_dense(wh).to_vector<double>(),
                            after = to_dense(change.param).to_vector<double>();
  for (int64_t p : kept) EXPECT_EQ(after[static_cast<size_t>(p)], before[static_cast<size_t>(p)]) << p;
  EXPECT_EQ(after[static_cast<size_t>(free)], 0.0);
  EXPECT_EQ(after[static_cast<size_t>(vh.positions[0])], 0.0);
}

}  // namespace
}  // namespace coppice::levels
