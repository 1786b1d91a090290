// Formats as levels: every built-in format is its level declaration (parts
// byte for byte), user and hybrid declarations round-trip through dense
// (randomized, with empty rows, empty blocks and n:m edge groups), and bad
// declarations and parts are refused naming the level and the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sparse/convert.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_format.h"
#include "sparse/levels/level_io.h"
#include "sparse/levels/level_tensor.h"
#include "tensor/ops.h"
#include "tests/sparse/test_util.h"
#include "tests/util/error_matchers.h"

namespace coppice::levels {
namespace {

using coppice::testing::bytes_of;
using coppice::testing::random_masked_input;

// Equal as values: NaN equals NaN, and -0 is told from +0.
::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << shape_to_string(a.shape()) << " " << dtype_name(a.dtype()) << " vs "
                                         << shape_to_string(b.shape()) << " " << dtype_name(b.dtype());
  }
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    const bool same =
        std::isnan(va[i]) ? std::isnan(vb[i]) : va[i] == vb[i] && std::signbit(va[i]) == std::signbit(vb[i]);
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_parts(const LevelTensor& a, const LevelTensor& b) {
  const auto pa = level_parts(a), pb = level_parts(b);
  if (pa.size() != pb.size()) return ::testing::AssertionFailure() << pa.size() << " parts vs " << pb.size();
  for (const auto& [name, part] : pa) {
    const auto it = pb.find(name);
    if (it == pb.end()) return ::testing::AssertionFailure() << "no part " << name;
    if (part.dtype() != it->second.dtype() || part.shape() != it->second.shape() ||
        bytes_of(part) != bytes_of(it->second)) {
      return ::testing::AssertionFailure()
             << "part " << name << ": " << dtype_name(part.dtype()) << " " << shape_to_string(part.shape()) << " vs "
             << dtype_name(it->second.dtype()) << " " << shape_to_string(it->second.shape()) << " or its bytes differ";
    }
  }
  return ::testing::AssertionSuccess();
}

// The mask with at most n of every m along the last dimension (the first n it holds).
Tensor at_most_n_of_m(const Tensor& mask, int64_t n, int64_t m) {
  std::vector<double> v = mask.to(DType::kF64).to_vector<double>();
  for (size_t start = 0; start < v.size(); start += static_cast<size_t>(m)) {
    int64_t kept = 0;
    for (size_t i = start; i < start + static_cast<size_t>(m); ++i) {
      if (v[i] != 0.0 && ++kept > n) v[i] = 0.0;
    }
  }
  return ne(from_vector(v, mask.shape(), TensorOptions(DType::kF64)), 0.0);
}

Tensor masked(const Tensor& x, const Tensor& mask) {
  return where(mask, x, zeros(x.shape(), TensorOptions(x.dtype())));
}

struct Builtin {
  const char* format;
  FormatOptions options;
};

TEST(Levels, EveryBuiltinFormatIsItsLevelDeclarationByteForByte) {
  const Builtin builtins[] = {{"csr", {}},
                              {"csc", {}},
                              {"coo", {}},
                              {"bsr", FormatOptions::block(2, 4)},
                              {"blocked_ell", FormatOptions::block(4)},
                              {"nm", FormatOptions::nm(2, 4)}};
  for (const Builtin& b : builtins) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        SCOPED_TRACE(::testing::Message() << b.format << " " << dtype_name(dtype) << " seed " << seed);
        auto in = random_masked_input({8, 16}, seed == 3 ? 0.0 : 0.3, seed, dtype, {1, 5}, {2});
        if (std::string_view(b.format) == "nm") in.mask = at_most_n_of_m(in.mask, 2, 4);
        const Tensor t = sparse_from_mask(in.x, in.mask, b.format, b.options);
        const LevelTensor of_builtin = level_tensor_of(t, "test");
        const LevelTensor declared =
            level_from_mask(in.x, in.mask, builtin_level_format(b.format, 2, b.options, "test"), "test");
        EXPECT_TRUE(same_parts(declared, of_builtin));
        // And back: the built-in tensor again, its parts byte for byte.
        const Tensor back = builtin_tensor_of(declared, b.format, "test");
        EXPECT_EQ(back.format(), t.format());
        EXPECT_TRUE(same_parts(level_tensor_of(back, "test"), of_builtin));
        // Against the masked values rather than to_dense(t): nm's decompression writes a stored -0 as +0.
        EXPECT_TRUE(same_values(level_to_dense(declared), masked(in.x, in.mask)));
      }
    }
  }
  // COO of three dimensions too.
  auto in = random_masked_input({4, 6}, 0.4, 7, DType::kF32);
  const Tensor x3 = in.x.reshape({2, 2, 6}), m3 = in.mask.reshape({2, 2, 6});
  const Tensor coo = sparse_from_mask(x3, m3, "coo");
  EXPECT_TRUE(same_parts(level_from_mask(x3, m3, builtin_level_format("coo", 3, {}, "test"), "test"),
                         level_tensor_of(coo, "test")));
}

LevelFormat with_block(std::vector<int64_t> block, std::vector<Level> levels) {
  LevelFormat f;
  f.block = std::move(block);
  f.levels = std::move(levels);
  return f;
}

TEST(Levels, UserAndHybridFormatsRoundTripThroughDense) {
  struct Case {
    const char* name;
    LevelFormat format;
    int64_t n = 0, m = 0;  // the mask's n:m limit along rows, where the format has one
  };
  LevelFormat csr64 = with_block({}, {dense(0), compressed(1)});
  csr64.index_dtype = DType::kI64;
  const Case cases[] = {
      {"ellpack", with_block({}, {dense(0), ranged(1)})},
      {"ellpack by columns", with_block({}, {dense(1), ranged(0)})},
      {"doubly compressed", with_block({}, {compressed(0), compressed(1)})},
      {"csr, i64 indices", csr64},
      {"bsr outside, coo inside", with_block({2, 4}, {dense(0), compressed(1), compressed(2, false), singleton(3)})},
      {"bsr outside, csr inside", with_block({2, 4}, {dense(0), compressed(1), dense(2), compressed(3)})},
      {"blocked ell outside, coo inside",
       with_block({4, 4}, {dense(0), ranged(1), compressed(2, false), singleton(3)})},
      {"bsr of 2:4", with_block({2, 8}, {dense(0), compressed(1), dense(2), n_out_of_m(3, 2, 4)}), 2, 4},
      {"block columns first", with_block({2, 4}, {dense(1), compressed(0), dense(3), dense(2)})},
  };
  for (const Case& c : cases) {
    for (uint64_t seed = 0; seed < 5; ++seed) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << describe(c.format) << " seed " << seed);
      const double keep = seed == 0 ? 0.0 : seed == 1 ? 1.0 : 0.25;
      auto in = random_masked_input({8, 16}, keep, seed, DType::kF32,
                                    seed > 1 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{});
      if (c.m != 0) in.mask = at_most_n_of_m(in.mask, c.n, c.m);
      const LevelTensor t = level_from_mask(in.x, in.mask, c.format, "test");
      EXPECT_TRUE(same_values(level_to_dense(t), masked(in.x, in.mask)));
      // Into CSR through the dense form and back: the same parts.
      const LevelFormat csr = builtin_level_format("csr", 2, {}, "test");
      const LevelTensor as_csr = level_from_mask(level_to_dense(t), in.mask, csr, "test");
      EXPECT_TRUE(same_parts(as_csr, level_from_mask(in.x, in.mask, csr, "test")));
    }
  }
  // Three dimensions, compressed at every level (CSF).
  auto in = random_masked_input({6, 10}, 0.3, 11, DType::kF64);
  const Tensor x3 = in.x.reshape({3, 2, 10}), m3 = in.mask.reshape({3, 2, 10});
  const LevelTensor csf =
      level_from_mask(x3, m3, with_block({}, {compressed(0), compressed(1), compressed(2)}), "test");
  EXPECT_TRUE(same_values(level_to_dense(csf), masked(x3, m3)));
}

TEST(Levels, ConversionsBetweenAnyTwoFormatsKeepEveryStoredEntry) {
  std::vector<LevelFormat> formats;
  for (const char* b : {"csr", "csc", "coo", "nm"}) formats.push_back(builtin_level_format(b, 2, {}, "t"));
  formats.push_back(builtin_level_format("bsr", 2, FormatOptions::block(2, 4), "t"));
  formats.push_back(builtin_level_format("blocked_ell", 2, FormatOptions::block(4), "t"));
  formats.push_back(with_block({}, {dense(0), ranged(1)}));
  formats.push_back(with_block({}, {compressed(0), compressed(1)}));
  formats.push_back(with_block({2, 4}, {dense(0), compressed(1), compressed(2, false), singleton(3)}));
  formats.push_back(with_block({2, 8}, {dense(0), compressed(1), dense(2), n_out_of_m(3, 2, 4)}));
  const LevelFormat csr = builtin_level_format("csr", 2, {}, "t");
  for (uint64_t seed = 0; seed < 3; ++seed) {
    // A mask of at most 2 of every 4 along rows, so that every format, the n:m ones too, can hold it.
    auto in = random_masked_input({8, 16}, seed == 0 ? 0.0 : 0.4, seed, DType::kF32, {3});
    in.mask = at_most_n_of_m(in.mask, 2, 4);
    const Tensor want = masked(in.x, in.mask);
    const LevelTensor exact = level_from_mask(in.x, in.mask, csr, "t");  // stores the mask and nothing more
    for (const LevelFormat& from : formats) {
      const LevelTensor source = level_from_mask(in.x, in.mask, from, "t");
      // Whole stored blocks (bsr, blocked_ell) keep their zeros, four of every four: no n:m target holds them.
      const bool whole_blocks =
          !from.block.empty() && from.levels[2].type == LevelType::kDense && from.levels[3].type == LevelType::kDense;
      for (const LevelFormat& to : formats) {
        if (whole_blocks && to.levels.back().type == LevelType::kNOutOfM) continue;
        SCOPED_TRACE(::testing::Message() << describe(from) << " -> " << describe(to) << " seed " << seed);
        const LevelTensor converted = level_convert(source, to, "t");
        EXPECT_TRUE(same_values(level_to_dense(converted), want));
      }
      // From a format that stores exactly the mask: the same parts as built from the mask.
      SCOPED_TRACE(describe(from));
      EXPECT_TRUE(same_parts(level_convert(exact, from, "t"), source));
    }
  }
  // Duplicates of a non-unique source are summed into a unique format.
  LevelTensor coo{builtin_level_format("coo", 2, {}, "t"), {2, 3}, {}, {}, Tensor()};
  coo.positions = {from_vector(std::vector<int64_t>{0, 3}, {2}), Tensor()};
  coo.coordinates = {from_vector(std::vector<int64_t>{1, 0, 1}, {3}), from_vector(std::vector<int64_t>{2, 0, 2}, {3})};
  coo.values = from_vector(std::vector<float>{1.5F, 2.0F, 0.25F}, {3});
  const LevelTensor summed = level_convert(coo, csr, "t");
  EXPECT_EQ(summed.values.to_vector<float>(), (std::vector<float>{2.0F, 1.75F}));
  // A source the target cannot hold is refused as a mask would be.
  const Tensor full = ne(ones({2, 8}), 0.0);
  EXPECT_ERROR_NAMING(
      level_convert(level_from_mask(ones({2, 8}), full, csr, "t"), builtin_level_format("nm", 2, {}, "t"), "convert"),
      "convert: level 1 (n_out_of_m(1)): group 0 (coordinates 0 to 3) of a parent stores 4 entries");
}

TEST(Levels, BadDeclarationsNameTheLevelAndTheReason) {
  const Shape shape{8, 8};
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {dense(0), dense(0)}), shape, "decl"),
                      "level 1 (dense(0)): walks dimension 0, which level 0 already walks");
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {dense(0)}), shape, "decl"),
                      "1 levels for the 2 dimensions of a tensor of shape [8, 8]");
  EXPECT_ERROR_NAMING(
      check_level_format(with_block({3, 4}, {dense(0), compressed(1), dense(2), dense(3)}), shape, "decl"),
      "block extent 3 does not divide dimension 0 of extent 8");
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {dense(0), singleton(1)}), shape, "decl"),
                      "level 1 (singleton(1)): a singleton must follow a non-unique compressed level or a singleton");
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {compressed(0, false), compressed(1)}), shape, "decl"),
                      "below a non-unique level every level must be a singleton");
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {dense(0), n_out_of_m(1, 2, 3)}), shape, "decl"),
                      "m = 3 does not divide dimension 1 of extent 8");
  EXPECT_ERROR_NAMING(check_level_format(with_block({}, {dense(0), n_out_of_m(1, 5, 4)}), shape, "decl"),
                      "n and m must satisfy 1 <= n <= m <= 256");
  LevelFormat floats = with_block({}, {dense(0), compressed(1)});
  floats.index_dtype = DType::kF32;
  EXPECT_ERROR_NAMING(check_level_format(floats, shape, "decl"), "level 1 (compressed(1)): index dtype f32");
  EXPECT_ERROR_NAMING(builtin_level_format("masked", 2, {}, "decl"), "'masked' is not a built-in sparse format");
  EXPECT_ERROR_NAMING(builtin_level_format("csr", 3, {}, "decl"), "the csr format takes matrices, not 3 dimensions");
  const LevelTensor ell =
      level_from_mask(ones({4, 4}), ne(ones({4, 4}), 0.0), with_block({}, {dense(0), ranged(1)}), "t");
  EXPECT_ERROR_NAMING(builtin_tensor_of(ell, "csr", "decl"),
                      "a tensor of (dense(0), ranged(1)) is not the csr format, which is (dense(0), compressed(1))");
  // A mask the format cannot hold.
  const Tensor x = ones({2, 8}), full = ne(x, 0.0);
  EXPECT_ERROR_NAMING(level_from_mask(x, full, with_block({}, {dense(0), n_out_of_m(1, 2, 4)}), "decl"),
                      "group 0 (coordinates 0 to 3) of a parent stores 4 entries, more than n = 2");
}

bool same_declaration(const LevelFormat& a, const LevelFormat& b) {
  if (a.levels.size() != b.levels.size()) return false;
  for (size_t k = 0; k < a.levels.size(); ++k) {
    if (a.levels[k].index_dtype != b.levels[k].index_dtype) return false;  // spelled the same way too
  }
  return same_levels(a, b) && a.index_dtype == b.index_dtype && a.value_dtype == b.value_dtype;
}

TEST(Levels, DeclarationsReadBackFromTheirText) {
  std::vector<LevelFormat> formats;
  for (const char* b : {"csr", "csc", "coo", "nm"}) formats.push_back(builtin_level_format(b, 2, {}, "t"));
  formats.push_back(builtin_level_format("bsr", 2, FormatOptions::block(2, 4), "t"));
  formats.push_back(builtin_level_format("blocked_ell", 2, FormatOptions::block(4), "t"));
  formats.push_back(builtin_level_format("coo", 3, {}, "t"));
  formats.push_back(with_block({2, 8}, {dense(0), compressed(1), dense(2), n_out_of_m(3, 2, 4)}));
  formats.push_back(with_block({4, 4}, {dense(0), ranged(1), compressed(2, false), singleton(3)}));
  for (const LevelFormat& f : formats) {
    SCOPED_TRACE(describe(f));
    EXPECT_TRUE(same_declaration(parse_level_format(describe(f), "t"), f));
  }
  // Dimensions default to the level's place; spaces are free.
  const LevelFormat csr = parse_level_format("  ( dense ,compressed )", "t");
  EXPECT_TRUE(same_declaration(csr, builtin_level_format("csr", 2, {}, "t")));
  EXPECT_EQ(describe(parse_level_format("blocked 2x2 (dense, compressed, dense, dense) index i64", "t")),
            "blocked 2x2 (dense(0), compressed(1), dense(2), dense(3)) index i64");

  EXPECT_ERROR_NAMING(parse_level_format("(dense, sparse)", "yaml"),
                      "yaml: level 1 'sparse': unknown level type 'sparse' (dense, compressed, singleton, ranged, "
                      "n_out_of_m)");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, n_out_of_m)", "yaml"),
                      "level 1 'n_out_of_m': n_out_of_m needs its n:m, as n_out_of_m(1, 2:4)");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, n_out_of_m(2:x))", "yaml"), "'2:x' is not n:m");
  EXPECT_ERROR_NAMING(parse_level_format("(dense(0, 1), compressed)", "yaml"), "names its dimension twice");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, ranged(non-unique))", "yaml"),
                      "level 1 'ranged(non-unique)': cannot read the argument 'non-unique' (a dimension, or an index "
                      "dtype)");
  EXPECT_ERROR_NAMING(parse_level_format("blocked 2xq (dense)", "yaml"),
                      "the block must be positive extents joined by x, as blocked 2x4");
  EXPECT_ERROR_NAMING(parse_level_format("dense, compressed", "yaml"),
                      "the levels must be a list in parentheses, as (dense, compressed)");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, compressed) please", "yaml"),
                      "after the levels only 'index DTYPE' and 'values DTYPE' may follow, got 'please'");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, compressed(1)", "yaml"), "an argument list must end the level");
}

TEST(Levels, ADeclaredValuesDtypeIsKeptAndChecked) {
  const LevelFormat f = parse_level_format("(dense, compressed) index i64 values bf16", "t");
  EXPECT_EQ(describe(f), "(dense(0), compressed(1)) index i64 values bf16");
  EXPECT_TRUE(same_declaration(parse_level_format(describe(f), "t"), f));
  EXPECT_EQ(describe(parse_level_format("(dense, compressed) values f16", "t")),
            "(dense(0), compressed(1)) values f16");
  auto in = random_masked_input({4, 8}, 0.5, 2, DType::kF32);
  const LevelTensor t = level_from_mask(in.x, in.mask, f, "t");
  EXPECT_EQ(t.values.dtype(), DType::kBF16);
  EXPECT_EQ(t.positions[1].dtype(), DType::kI64);
  EXPECT_TRUE(same_values(level_to_dense(t), masked(in.x, in.mask).to(DType::kBF16)));
  LevelTensor wrong = t;
  wrong.values = t.values.to(DType::kF32);
  EXPECT_ERROR_NAMING(check_level_tensor(wrong, "parts"), "parts: values must be bf16, got f32");
  EXPECT_ERROR_NAMING(check_level_format(parse_level_format("(dense, compressed) values i32", "t"), {4, 8}, "decl"),
                      "values dtype i32 (f32, f64, bf16 or f16)");
  EXPECT_ERROR_NAMING(parse_level_format("(dense, compressed) values", "yaml"),
                      "after the levels only 'index DTYPE' and 'values DTYPE' may follow");
}

TEST(Levels, LevelTensorsRoundTripThroughSafetensors) {
  auto in = random_masked_input({8, 16}, 0.3, 5, DType::kBF16, {2});
  const LevelTensor hybrid = level_from_mask(
      in.x, in.mask, with_block({4, 4}, {dense(0), ranged(1), compressed(2, false), singleton(3)}), "t");
  const LevelTensor csr = level_from_mask(in.x, in.mask, builtin_level_format("csr", 2, {}, "t"), "t");
  NamedTensors tensors{{"dense", in.x}};
  std::map<std::string, std::string> metadata{{"note", "kept"}};
  add_level_tensor("fc1.weight", hybrid, tensors, metadata);
  add_level_tensor("fc2.weight", csr, tensors, metadata);
  const absl::StatusOr<std::string> bytes = serialize_safetensors(tensors, metadata);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const absl::StatusOr<SafetensorsFile> file = parse_safetensors(*bytes, "ckpt");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_NE(file->find("fc1.weight.coordinates_1"), nullptr);  // the parts, named by level, for any reader
  const auto read = level_tensors_of(*file, "ckpt");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2U);
  EXPECT_TRUE(same_declaration(read->at("fc1.weight").format, hybrid.format));
  EXPECT_TRUE(same_parts(read->at("fc1.weight"), hybrid));
  EXPECT_TRUE(same_parts(read->at("fc2.weight"), csr));

  // A broken part or a missing entry is an error naming the file and the tensor.
  SafetensorsFile broken = *file;
  broken.metadata.erase("coppice.shape.fc2.weight");
  EXPECT_NE(std::string(level_tensors_of(broken, "ckpt").status().message())
                .find("ckpt: level tensor 'fc2.weight': no coppice.shape.fc2.weight metadata entry"),
            std::string::npos);
  broken = *file;
  for (auto& [name, t] : broken.tensors) {
    if (name == "fc2.weight.coordinates_1")
      t = coppice::testing::i32(std::vector<int64_t>(static_cast<size_t>(t.numel()), 16));
  }
  EXPECT_NE(std::string(level_tensors_of(broken, "ckpt").status().message())
                .find("ckpt: level tensor 'fc2.weight': level 1 (compressed(1)): coordinate 0 is 16, outside [0, 16)"),
            std::string::npos);
  broken = *file;
  broken.metadata["coppice.levels.fc2.weight"] = "(dense, sparse)";
  EXPECT_NE(std::string(level_tensors_of(broken, "ckpt").status().message()).find("unknown level type 'sparse'"),
            std::string::npos);
}

TEST(Levels, BrokenPartsNameTheLevelAndThePosition) {
  auto in = random_masked_input({4, 8}, 0.5, 3, DType::kF32, {}, {0});
  const LevelTensor csr = level_from_mask(in.x, in.mask, builtin_level_format("csr", 2, {}, "t"), "t");
  LevelTensor bad = csr;
  bad.coordinates[1] = coppice::testing::i32(std::vector<int64_t>(static_cast<size_t>(csr.coordinates[1].numel()), 99));
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"),
                      "parts: level 1 (compressed(1)): coordinate 0 is 99, outside [0, 8)");
  bad = csr;
  std::vector<int64_t> pos = csr.positions[1].to(DType::kI64).to_vector<int64_t>();
  pos[2] = pos[1] - 1 < 0 ? 0 : pos[1] - 1;
  pos[1] = pos[2] + 1;
  bad.positions[1] = coppice::testing::i32(pos);
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"), "positions decrease at 2");
  bad = csr;
  bad.values = zeros({1});
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"), "values must be 1-D of");
  bad = csr;
  bad.positions[1] = csr.positions[1].to(DType::kI64);
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"), "positions must be i32, got i64");

  // A shape whose dense levels would count more positions than int64 holds is refused, not wrapped.
  LevelTensor huge{
      with_block({}, {dense(0), dense(1), dense(2)}), {int64_t{1} << 31, int64_t{1} << 31, 4}, {}, {}, zeros({1})};
  huge.positions.resize(3);
  huge.coordinates.resize(3);
  EXPECT_ERROR_NAMING(check_level_tensor(huge, "parts"),
                      "level 2 (dense(2)): 4611686018427387904 x 4 positions overflow int64");

  const LevelTensor ell = level_from_mask(in.x, in.mask, with_block({}, {dense(0), ranged(1)}), "t");
  bad = ell;
  std::vector<int64_t> slots = ell.coordinates[1].to(DType::kI64).to_vector<int64_t>();
  const int64_t width = static_cast<int64_t>(slots.size()) / 4;
  ASSERT_GE(width, 2);
  slots[0] = -1;  // padding first in row 0, which is full
  bad.coordinates[1] = coppice::testing::i32(slots);
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"),
                      "level 1 (ranged(1)): slot 1 is not increasing, or follows padding");

  const LevelTensor nm = level_from_mask(in.x, at_most_n_of_m(in.mask, 2, 4),
                                         builtin_level_format("nm", 2, FormatOptions::nm(2, 4), "t"), "t");
  bad = nm;
  std::vector<int64_t> places = nm.coordinates[1].to(DType::kI64).to_vector<int64_t>();
  std::swap(places[0], places[1]);
  bad.coordinates[1] = from_vector(places, {static_cast<int64_t>(places.size())}).to(DType::kU8);
  EXPECT_ERROR_NAMING(check_level_tensor(bad, "parts"),
                      "level 1 (n_out_of_m(1)): places of group 0 are not increasing at 1");
}

}  // namespace
}  // namespace coppice::levels
