// Tests for sparse/nm_metadata.h: metadata bits written out by hand, explicit
// zeros, the round trip over random masks and dtypes, every 4-bit field, and
// the checks of both directions.
#include "sparse/nm_metadata.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/nm.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;

// The metadata words (u8 pairs, little-endian), row-major.
std::vector<uint16_t> words_of(const Tensor& metadata) {
  EXPECT_EQ(metadata.dtype(), DType::kU8);
  const std::vector<int> b = metadata.to_vector<int>();
  std::vector<uint16_t> w(b.size() / 2);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
  return w;
}

// Metadata u8 [rows, 2 * words per row] holding `words`.
Tensor metadata_of(const std::vector<uint16_t>& words, int64_t rows) {
  std::vector<int64_t> b;
  for (uint16_t w : words) {
    b.push_back(w & 0xFF);
    b.push_back(w >> 8);
  }
  return from_vector(b, {rows, static_cast<int64_t>(b.size()) / rows}, TensorOptions(DType::kU8));
}

// A bool mask of `keep` (flat positions) over `numel` elements, as [1, numel].
Tensor mask_of(const std::vector<int64_t>& keep, int64_t numel) {
  std::vector<bool> m(static_cast<size_t>(numel), false);
  for (int64_t k : keep) m[static_cast<size_t>(k)] = true;
  return from_vector(m, {1, numel});
}

// 1, 2, ..., numel as [rows, numel / rows].
Tensor counting(int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  return f32(v, {rows, cols});
}

TEST(NmMetadataTest, OneRowByHand) {
  // Groups keep (0, 1), (0, 2), (1, 3), (2, 3): fields first | second << 2 are
  // 0b0100, 0b1000, 0b1101, 0b1110, group j at bits 4j: the word 0xED84.
  Tensor x = counting(1, 16);
  Tensor nm = nm_compress(x, mask_of({0, 1, 4, 6, 9, 11, 14, 15}, 16), 2, 4);
  Nm24Packed p = pack_nm24(nm);
  EXPECT_EQ(p.metadata.shape(), (Shape{1, 2}));
  EXPECT_EQ(p.metadata.to_vector<int>(), (std::vector<int>{0x84, 0xED}));  // little-endian
  EXPECT_EQ(words_of(p.metadata), (std::vector<uint16_t>{0xED84}));
  EXPECT_EQ(p.values.shape(), (Shape{1, 8}));
  EXPECT_EQ(p.values.to_vector<float>(), (std::vector<float>{1, 2, 5, 7, 10, 12, 15, 16}));
  EXPECT_TRUE(p.values.is_same(nm_impl(nm, "test").values()));  // shared, not copied
  EXPECT_TRUE(exact_equal(to_dense(unpack_nm24(p.values, p.metadata, {1, 16})), to_dense(nm)));
}

TEST(NmMetadataTest, TwoRowsTwoWordsByHand) {
  // Row 0: (0, 3), (1, 2), (0, 1), (2, 3) | (1, 3), (0, 2), (1, 2), (0, 3)
  //   fields 0xC, 0x9, 0x4, 0xE | 0xD, 0x8, 0x9, 0xC -> 0xE49C, 0xC98D
  // Row 1: (2, 3) x 4 | (0, 1) x 4 -> 0xEEEE, 0x4444
  std::vector<int64_t> keep = {0, 3, 5, 6, 8, 9, 14, 15, 17, 19, 20, 22, 25, 26, 28, 31};
  for (int64_t g = 0; g < 4; ++g) {
    keep.push_back(32 + 4 * g + 2);
    keep.push_back(32 + 4 * g + 3);
    keep.push_back(48 + 4 * g);
    keep.push_back(48 + 4 * g + 1);
  }
  Tensor nm = nm_compress(counting(2, 32), mask_of(keep, 64).view({2, 32}), 2, 4);
  Nm24Packed p = pack_nm24(nm);
  EXPECT_EQ(p.metadata.shape(), (Shape{2, 4}));
  EXPECT_EQ(words_of(p.metadata), (std::vector<uint16_t>{0xE49C, 0xC98D, 0xEEEE, 0x4444}));
  EXPECT_TRUE(exact_equal(to_dense(unpack_nm24(p.values, p.metadata, {2, 32})), to_dense(nm)));
}

TEST(NmMetadataTest, ExplicitZerosStillEncodeTwoIndices) {
  // Groups keeping {3}, {}, {0}, {2}: nm_compress fills explicit zeros at the
  // lowest free positions, (0, 3), (0, 1), (0, 1), (0, 2): 0x844C.
  Tensor nm = nm_compress(counting(1, 16), mask_of({3, 8, 14}, 16), 2, 4);
  EXPECT_EQ(words_of(pack_nm24(nm).metadata), (std::vector<uint16_t>{0x844C}));
  // An all-zero matrix: (0, 1) everywhere.
  EXPECT_EQ(words_of(pack_nm24(nm_compress(zeros({1, 16}))).metadata), (std::vector<uint16_t>{0x4444}));
}

TEST(NmMetadataTest, RoundTripOverRandomMasksAndDtypes) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64}) {
    for (uint64_t seed = 0; seed < 10; ++seed) {
      // Each group keeps a random subset of at most two positions.
      std::mt19937_64 rng(seed);
      const int64_t rows = 1 + static_cast<int64_t>(rng() % 9), cols = 16 * (1 + static_cast<int64_t>(rng() % 4));
      std::vector<bool> keep(static_cast<size_t>(rows * cols), false);
      for (int64_t g = 0; g < rows * cols / 4; ++g) {
        const int64_t count = static_cast<int64_t>(rng() % 3);
        for (int64_t k = 0; k < count; ++k) keep[static_cast<size_t>(4 * g + static_cast<int64_t>(rng() % 4))] = true;
      }
      Tensor x = testing::random_sparse({rows, cols}, 1.0, seed, dtype);
      Tensor nm = nm_compress(x, from_vector(keep, {rows, cols}), 2, 4);
      Nm24Packed p = pack_nm24(nm);
      EXPECT_EQ(p.values.dtype(), dtype);
      EXPECT_EQ(p.metadata.shape(), (Shape{rows, cols / 8}));
      Tensor back = unpack_nm24(p.values, p.metadata, {rows, cols});
      EXPECT_TRUE(testing::same_parts(back, nm)) << dtype_name(dtype) << " seed " << seed;
      EXPECT_TRUE(exact_equal(to_dense(back), to_dense(nm))) << dtype_name(dtype) << " seed " << seed;
    }
    // And the magnitude 2:4 of a random matrix.
    Tensor nm = nm_compress(testing::random_sparse({5, 64}, 0.7, 99, dtype), 2, 4);
    Nm24Packed p = pack_nm24(nm);
    EXPECT_TRUE(exact_equal(to_dense(unpack_nm24(p.values, p.metadata, {5, 64})), to_dense(nm)));
  }
}

TEST(NmMetadataTest, ColumnsAreTheUnpackedTensorsColumns) {
  // nm24_columns (what the CPU products read) is each entry's column, in the
  // values' order: group * 4 plus the index the n:m tensor stores.
  for (uint64_t seed = 0; seed < 6; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 7), cols = 16 * (1 + static_cast<int64_t>(rng() % 3));
    Tensor nm = nm_compress(testing::random_sparse({rows, cols}, 0.6, seed, DType::kF32), 2, 4);
    const std::vector<int32_t> columns = nm24_columns(pack_nm24(nm).metadata, {rows, cols});
    const std::vector<int64_t> pos = nm_impl(nm, "test").indices().to(DType::kI64).to_vector<int64_t>();
    ASSERT_EQ(columns.size(), pos.size());
    for (size_t e = 0; e < pos.size(); ++e) {
      const int64_t group = static_cast<int64_t>(e / 2) % (cols / 4);
      EXPECT_EQ(columns[e], group * 4 + pos[e]) << "entry " << e << " seed " << seed;
    }
  }
  EXPECT_ERROR_NAMING(nm24_columns(metadata_of({0x4444}, 1), {1, 32}), "nm24_columns: metadata has shape [1, 2]");
  EXPECT_ERROR_NAMING(nm24_columns(metadata_of({0x4444}, 1).to(DType::kI32), {1, 16}),
                      "nm24_columns: metadata must be u8");
  EXPECT_ERROR_NAMING(nm24_columns(metadata_of({0x4440}, 1), {1, 16}), "do not strictly increase");
}

TEST(NmMetadataTest, EveryFourBitField) {
  // Field v in group 0, valid (0, 1) fields elsewhere: the six with
  // first < second decode, the others are refused, among them PTX's invalid
  // 0b0000, 0b0101, 0b1010, 0b1111.
  Tensor values = counting(1, 8);
  int valid = 0;
  for (uint16_t v = 0; v < 16; ++v) {
    const int64_t first = v & 3, second = v >> 2;
    Tensor meta = metadata_of({static_cast<uint16_t>(0x4440 | v)}, 1);
    if (first < second) {
      ++valid;
      Tensor nm = unpack_nm24(values, meta, {1, 16});
      EXPECT_EQ(nm_impl(nm, "test").indices().to_vector<int>(),
                (std::vector<int>{static_cast<int>(first), static_cast<int>(second), 0, 1, 0, 1, 0, 1}));
    } else {
      EXPECT_ERROR_NAMING(unpack_nm24(values, meta, {1, 16}),
                          "unpack_nm24: metadata of row 0, group 0 (columns 0..3) holds indices (" +
                              std::to_string(first) + ", " + std::to_string(second) +
                              "), which do not strictly increase");
    }
  }
  EXPECT_EQ(valid, 6);
}

TEST(NmMetadataTest, UnpackNamesTheFirstBadField) {
  // Row 1, group 2 holds (1, 1): 0b0101.
  EXPECT_ERROR_NAMING(unpack_nm24(counting(2, 8), metadata_of({0x4444, 0x4544}, 2), {2, 16}),
                      "unpack_nm24: metadata of row 1, group 2 (columns 8..11) holds indices (1, 1)");
  // Row 0, group 5 (second word, group 1) holds (1, 0): 0b0001, decreasing.
  EXPECT_ERROR_NAMING(unpack_nm24(counting(2, 16), metadata_of({0x4444, 0x4414, 0x4544, 0x4444}, 2), {2, 32}),
                      "unpack_nm24: metadata of row 0, group 5 (columns 20..23) holds indices (1, 0)");
}

TEST(NmMetadataTest, PackRefusesOtherTensors) {
  Tensor x = testing::random_sparse({2, 16}, 0.9, 1);
  EXPECT_ERROR_NAMING(pack_nm24(nm_compress(x, 1, 4)),
                      "pack_nm24: needs a 2-D 2:4 tensor, got n:m = 1:4 with dim 2 (shape [2, 16])");
  EXPECT_ERROR_NAMING(pack_nm24(nm_compress(x, 2, 8)), "pack_nm24: needs a 2-D 2:4 tensor, got n:m = 2:8");
  EXPECT_ERROR_NAMING(pack_nm24(nm_compress(zeros({2, 2, 16}))),
                      "pack_nm24: needs a 2-D 2:4 tensor, got n:m = 2:4 with dim 3 (shape [2, 2, 16])");
  EXPECT_ERROR_NAMING(pack_nm24(nm_compress(zeros({16}))), "got n:m = 2:4 with dim 1 (shape [16])");
  EXPECT_ERROR_NAMING(pack_nm24(nm_compress(zeros({2, 24}))),
                      "pack_nm24: cols = 24 of shape [2, 24] is not a multiple of 16 (one metadata word covers 16 "
                      "columns)");
  EXPECT_ERROR_NAMING(pack_nm24(x), "pack_nm24: expected an n:m tensor, got format 'dense'");
}

TEST(NmMetadataTest, UnpackRefusesBadParts) {
  Tensor values = counting(2, 16);
  Tensor meta = metadata_of({0x4444, 0x4444, 0x4444, 0x4444}, 2);
  EXPECT_ERROR_NAMING(unpack_nm24(values, meta, {64}), "unpack_nm24: shape must be 2-D, got [64]");
  EXPECT_ERROR_NAMING(unpack_nm24(values, meta, {2, 2, 16}), "unpack_nm24: shape must be 2-D, got [2, 2, 16]");
  EXPECT_ERROR_NAMING(unpack_nm24(values, meta, {4, 8}),
                      "unpack_nm24: cols = 8 of shape [4, 8] is not a multiple of 16");
  EXPECT_ERROR_NAMING(unpack_nm24(values, meta, {2, 64}),
                      "unpack_nm24: values and metadata have shapes [2, 16] and [2, 4], expected [2, 32] and [2, 8] "
                      "for shape [2, 64]");
  EXPECT_ERROR_NAMING(unpack_nm24(values, metadata_of({0x4444, 0x4444}, 2), {2, 32}),
                      "unpack_nm24: values and metadata have shapes [2, 16] and [2, 2], expected [2, 16] and [2, 4]");
  EXPECT_ERROR_NAMING(unpack_nm24(values, meta.to(DType::kI32), {2, 32}),
                      "unpack_nm24: metadata must be u8 (little-endian u16 words), got i32");
  EXPECT_ERROR_NAMING(unpack_nm24(values.to(DType::kI32), meta, {2, 32}),
                      "unpack_nm24: values must be floating point (f32, f64, bf16, f16), got i32");
  EXPECT_ERROR_NAMING(unpack_nm24(values, Tensor(), {2, 32}), "unpack_nm24: metadata is an undefined tensor");
}

// S^T's hardware form: a 16x16 pattern keeping, in every 4x4 tile, the
// diagonal pairs {0,1},{0,1},{2,3},{2,3} (transposable), whose transpose is
// the same pattern; and S^T equals pack_nm24 of the transposed dense matrix.
TEST(NmMetadataTest, TransposedPackIsThePackOfTheTranspose) {
  std::vector<int64_t> keep;
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t tile = 0; tile < 4; ++tile) {
      const int64_t first = r % 4 < 2 ? 0 : 2;
      keep.push_back(r * 16 + tile * 4 + first);
      keep.push_back(r * 16 + tile * 4 + first + 1);
    }
  }
  const Tensor x = counting(16, 16);
  const Tensor nm = nm_compress(x, mask_of(keep, 256).reshape({16, 16}), 2, 4);
  const Nm24Packed t = pack_nm24_transposed(nm);
  EXPECT_EQ(t.values.shape(), (Shape{16, 8}));
  // Rows c of S^T with c % 4 < 2 keep (0, 1) in every group (field 0b0100),
  // the others (2, 3) (0b1110).
  std::vector<uint16_t> words;
  for (int64_t c = 0; c < 16; ++c) words.push_back(c % 4 < 2 ? 0x4444 : 0xEEEE);
  EXPECT_EQ(words_of(t.metadata), words);
  const Tensor xt = to_dense(nm).t().contiguous();
  const Nm24Packed want = pack_nm24(nm_compress(xt, mask_of(keep, 256).reshape({16, 16}), 2, 4));
  EXPECT_TRUE(exact_equal(t.values, want.values));
  EXPECT_TRUE(exact_equal(t.metadata, want.metadata));
  EXPECT_TRUE(exact_equal(to_dense(unpack_nm24(t.values, t.metadata, {16, 16})), xt));
}

TEST(NmMetadataTest, TransposedPackRefusesPatternsThatAreNotTransposable) {
  // Every row keeps columns 0 and 1 of each group: column 0 stores 4 entries
  // in rows 0..3.
  EXPECT_ERROR_NAMING(pack_nm24_transposed(nm_compress(counting(16, 16), 2, 4)),
                      "pack_nm24_transposed: column 2 stores 4 entries in rows 0..3, more than 2: the pattern is "
                      "not transposable");
  EXPECT_ERROR_NAMING(pack_nm24_transposed(nm_compress(counting(8, 16), 2, 4)),
                      "pack_nm24_transposed: rows = 8 of shape [8, 16] is not a multiple of 16");
}

TEST(NmMetadataTest, CudaMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine";
  Tensor nm = nm_compress(testing::random_sparse({8, 64}, 0.8, 5), 2, 4);
  Nm24Packed cpu = pack_nm24(nm);
  Nm24Packed gpu = pack_nm24(to_device(nm, Device::cuda()));
  EXPECT_EQ(gpu.metadata.device(), Device::cuda());
  EXPECT_TRUE(exact_equal(gpu.metadata.to(Device::cpu()), cpu.metadata));
  Tensor back = unpack_nm24(gpu.values, gpu.metadata, {8, 64});
  EXPECT_TRUE(exact_equal(to_dense(back).to(Device::cpu()), to_dense(nm)));
}

}  // namespace
}  // namespace coppice
