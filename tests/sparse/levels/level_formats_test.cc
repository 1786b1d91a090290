// Formats declared by their levels in the format table (level_impl.h): each
// kind of declaration (ELL, a hybrid with COO inside BSR blocks, CSR with
// i64 indices, BSR with rectangular dense blocks, n:m) converts by name,
// runs the products, SDDMM and elementwise ops on the family's generic
// kernels without a dense fallback, has float64 gradients through a linear
// layer, saves and loads, and gives mask updates its positions and unit.
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
#include "sparse/levels/level_impl.h"
#include "sparse/ops.h"
#include "sparse/sparse_impl.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"
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
