// Tests for sparse/convert.h: every pair of formats on random data at several
// densities and shapes (empty rows, a single row, non-square, empty), exact
// round trips, pattern preservation, the direct paths, from a mask or a
// threshold, transposes, bad requests, and CPU-vs-CUDA parity.
#include "sparse/convert.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sparse/test_util.h"

namespace coppice {
namespace {

using testing::exact_equal;
using testing::f32;
using testing::i32;
using testing::i64;
using testing::same_parts;

const std::vector<std::string> kFormats = {"dense", "coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked"};

struct Case {
  Shape shape;
  std::vector<int64_t> empty_rows;
  int64_t bh, bw, ell_block;
};

// Shapes with block sizes that divide them; the last dim is a multiple of 4 for n:m.
const std::vector<Case> kCases = {
    {{8, 12}, {}, 2, 4, 4},             // non-square
    {{1, 12}, {}, 1, 3, 1},             // a single row
    {{12, 8}, {0, 5, 6, 11}, 3, 2, 2},  // empty rows, tall
    {{16, 4}, {}, 4, 4, 4},             // one block column
    {{0, 8}, {}, 1, 2, 2},              // no rows
};
const std::vector<double> kDensities = {0.0, 0.05, 0.3, 0.5, 1.0};

// Random data that fits the n:m options used with it (2:4, or 4:4 when dense).
Tensor case_data(const Case& c, double density, uint64_t seed, DType dtype, FormatOptions* options) {
  *options = FormatOptions{c.bh, c.bw, density >= 1.0 ? 4 : 2, 4};
  Tensor x = testing::random_sparse(c.shape, density, seed, DType::kF64, c.empty_rows);
  if (density < 1.0) x = nm_decompress(nm_compress(x, 2, 4));
  return x.to(dtype);
}

FormatOptions for_format(const std::string& f, const Case& c, const FormatOptions& o) {
  FormatOptions r = o;
  if (f == "blocked_ell") r.block_rows = r.block_cols = c.ell_block;
  return r;
}

TEST(ConvertTest, EveryPairRoundTripsExactly) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (double density : kDensities) {
      FormatOptions o;
      Tensor x = case_data(c, density, seed++, DType::kF32, &o);
      for (const std::string& from : kFormats) {
        Tensor a = to_format(x, from, for_format(from, c, o));
        ASSERT_EQ(a.format(), from);
        ASSERT_TRUE(exact_equal(to_dense(a), x)) << from << " " << shape_to_string(c.shape) << " d=" << density;
        for (const std::string& to : kFormats) {
          SCOPED_TRACE(from + " -> " + to + " " + shape_to_string(c.shape) + " density " + std::to_string(density));
          Tensor b = to_format(a, to, for_format(to, c, o));
          ASSERT_EQ(b.format(), to);
          EXPECT_EQ(b.shape(), x.shape());
          EXPECT_EQ(b.dtype(), x.dtype());
          EXPECT_TRUE(exact_equal(to_dense(b), x));
          Tensor back = to_format(b, from, for_format(from, c, o));
          EXPECT_EQ(back.format(), from);
          EXPECT_TRUE(exact_equal(to_dense(back), x));
        }
      }
    }
  }
}

TEST(ConvertTest, OtherDtypesRoundTripExactly) {
  const Case c = kCases[2];
  for (DType t : {DType::kF64, DType::kBF16, DType::kF16}) {
    for (double density : {0.3, 1.0}) {
      FormatOptions o;
      Tensor x = case_data(c, density, 42, t, &o);
      for (const std::string& from : kFormats) {
        Tensor a = to_format(x, from, for_format(from, c, o));
        for (const std::string& to : kFormats) {
          Tensor b = to_format(a, to, for_format(to, c, o));
          EXPECT_EQ(b.dtype(), t);
          EXPECT_TRUE(exact_equal(to_dense(b), x)) << from << " -> " << to << " " << dtype_name(t);
        }
      }
    }
  }
}

TEST(ConvertTest, DensityZeroAndOneGiveExpectedNnz) {
  Tensor z = zeros({6, 8});
  for (const char* f : {"coo", "csr", "csc", "bsr", "blocked_ell", "masked"}) {
    EXPECT_EQ(nnz(to_format(z, f, FormatOptions::block(2))), 0) << f;
  }
  Tensor o = ones({6, 8});
  for (const char* f : {"coo", "csr", "csc", "bsr", "blocked_ell", "masked"}) {
    EXPECT_EQ(nnz(to_format(o, f, FormatOptions::block(2))), 48) << f;
  }
  EXPECT_EQ(nnz(to_format(o, "nm", FormatOptions::nm(4, 4))), 48);
}

TEST(ConvertTest, ExplicitZerosSurviveWherePossible) {
  // A CSR with a stored zero at (0, 1).
  Tensor a = sparse_csr(i32({0, 2, 3}), i32({1, 3, 0}), f32({0, 5, 6}), {2, 4});
  for (const char* f : {"coo", "csc", "masked"}) {
    Tensor b = to_format(a, f);
    EXPECT_EQ(nnz(b), 3) << f;
    EXPECT_EQ(nnz(to_format(b, "csr")), 3) << f;
  }
  EXPECT_EQ(nnz(to_format(a, "bsr", FormatOptions::block(1, 2))), 6);  // blocks (0,0), (0,1), (1,0)
  EXPECT_EQ(nnz(to_format(a, "dense")), 8);
  // From dense the pattern is the non-zeros; n:m keeps non-zeros in any case.
  EXPECT_EQ(nnz(to_format(to_dense(a), "csr")), 2);
  // A BSR whose blocks hold zeros converts to COO with every block entry.
  Tensor bsr = dense_to_bsr(f32({1, 0, 0, 0}, {2, 2}), 2, 2);
  EXPECT_EQ(nnz(bsr_to_coo(bsr)), 4);
  EXPECT_TRUE(exact_equal(to_dense(to_format(bsr, "nm", FormatOptions::nm(1, 2))), f32({1, 0, 0, 0}, {2, 2})));
}

TEST(ConvertTest, CsrToCscIsARealTransposeSort) {
  Tensor x = testing::random_sparse({7, 9}, 0.3, 5, DType::kF32, {2});
  Tensor csr = to_format(x, "csr");
  Tensor csc = csr_to_csc(csr);
  const CompressedImpl& c = csr_impl(csc, "test");
  EXPECT_FALSE(c.is_csr());
  EXPECT_EQ(c.pointers().numel(), 10);
  EXPECT_TRUE(exact_equal(to_dense(csc), x));
  // The CSC of x holds the arrays of the CSR of x^T.
  Tensor csr_of_t = to_format(x.t().contiguous(), "csr");
  EXPECT_TRUE(exact_equal(c.pointers(), csr_impl(csr_of_t, "test").pointers()));
  EXPECT_TRUE(exact_equal(c.indices(), csr_impl(csr_of_t, "test").indices()));
  EXPECT_TRUE(exact_equal(c.values(), csr_impl(csr_of_t, "test").values()));
  // And back, exactly the original arrays.
  EXPECT_TRUE(same_parts(csc_to_csr(csc), csr));
  // The free transpose of the CSC is the CSR of x^T over the same arrays.
  Tensor t = transpose_compressed(csc);
  EXPECT_EQ(t.format(), "csr");
  EXPECT_TRUE(same_parts(t, csr_of_t));
  EXPECT_ERROR_NAMING(csr_to_csc(csc), "csr_to_csc: expected a csr tensor, got 'csc'");
}

TEST(ConvertTest, CooAndCsrDirectPaths) {
  // (2, 3) = 1, (0, 3) = 2, (2, 0) = 3, (0, 3) = 4: unsorted, (0, 3) twice.
  Tensor coo = sparse_coo(i64({2, 0, 2, 0, 3, 3, 0, 3}, {2, 4}), f32({1, 2, 3, 4}), {3, 4});
  Tensor csr = coo_to_csr(coo);
  EXPECT_EQ(csr_impl(csr, "test").pointers().to_vector<int>(), (std::vector<int>{0, 1, 1, 3}));
  EXPECT_EQ(csr_impl(csr, "test").indices().to_vector<int>(), (std::vector<int>{3, 0, 3}));
  EXPECT_EQ(csr_impl(csr, "test").values().to_vector<float>(), (std::vector<float>{6, 3, 1}));
  Tensor csc = coo_to_csc(coo);
  EXPECT_EQ(csr_impl(csc, "test").pointers().to_vector<int>(), (std::vector<int>{0, 1, 1, 1, 3}));
  EXPECT_EQ(csr_impl(csc, "test").indices().to_vector<int>(), (std::vector<int>{2, 0, 2}));
  EXPECT_EQ(csr_impl(csc, "test").values().to_vector<float>(), (std::vector<float>{3, 6, 1}));
  Tensor back = compressed_to_coo(csc);
  EXPECT_TRUE(coo_impl(back, "test").is_coalesced());
  EXPECT_TRUE(same_parts(back, coalesce(coo)));
  EXPECT_TRUE(same_parts(compressed_to_coo(csr), coalesce(coo)));
  EXPECT_ERROR_NAMING(coo_to_csr(sparse_coo(i64({0, 0, 0}, {3, 1}), f32({1}), {2, 2, 2})),
                      "coo_to_csr: needs a 2-D tensor, got shape [2, 2, 2]");
}

TEST(ConvertTest, NDimensionalCooAndFriends) {
  Tensor x = testing::random_sparse({3, 4, 8}, 0.3, 8);
  x = nm_decompress(nm_compress(x, 2, 4));
  for (const char* f : {"coo", "nm", "masked", "dense"}) {
    EXPECT_TRUE(exact_equal(to_dense(to_format(x, f)), x)) << f;
    EXPECT_TRUE(exact_equal(to_dense(to_format(to_format(x, f), "coo")), x)) << f;
  }
  EXPECT_ERROR_NAMING(to_format(x, "csr"), "to_format: format 'csr' needs a 2-D tensor, got shape [3, 4, 8]");
}

TEST(ConvertTest, FromMaskAndThreshold) {
  Tensor x = f32({0.5f, -3, 0, 2, -0.1f, 1, 4, 0}, {2, 4});
  Tensor mask = from_vector(std::vector<bool>{true, false, true, false, false, false, true, true}, {2, 4});
  Tensor masked_dense = f32({0.5f, 0, 0, 0, 0, 0, 4, 0}, {2, 4});
  const FormatOptions o{1, 2, 2, 4};
  for (const std::string& f : kFormats) {
    const FormatOptions of = f == "blocked_ell" ? FormatOptions::block(2) : o;
    Tensor a = sparse_from_mask(x, mask, f, of);
    EXPECT_EQ(a.format(), f);
    EXPECT_TRUE(exact_equal(to_dense(a), masked_dense)) << f;
    Tensor t = sparse_from_threshold(x, 0.9, f, of);
    EXPECT_TRUE(exact_equal(to_dense(t), f32({0, -3, 0, 2, 0, 1, 4, 0}, {2, 4}))) << f;
  }
  // The mask's pattern is kept, explicit zeros included.
  EXPECT_EQ(nnz(sparse_from_mask(x, mask, "csr")), 4);
  EXPECT_EQ(nnz(sparse_from_mask(x, mask, "masked")), 4);
  EXPECT_ERROR_NAMING(sparse_from_mask(x, ones({2, 4}), "csr"), "sparse_from_mask: mask must be bool, got f32");
  EXPECT_ERROR_NAMING(sparse_from_mask(x, ones({4, 2}, DType::kBool), "csr"),
                      "sparse_from_mask: mask of shape [4, 2] for a tensor of shape [2, 4]");
  Tensor full_mask = ones({2, 4}, DType::kBool);
  EXPECT_ERROR_NAMING(sparse_from_mask(x, full_mask, "nm", o),
                      "sparse_from_mask: group 0 of row 0 (last-dim positions 0..3) has 4 non-zeros, more than n = 2");
}

TEST(ConvertTest, TransposeEveryFormat) {
  Tensor x = testing::random_sparse({8, 12}, 0.3, 21, DType::kF32, {3});
  x = nm_decompress(nm_compress(x, 1, 4));  // 1:4 along rows; its transpose has at most 2 per group of 4 columns
  Tensor xt = x.t().contiguous();
  const FormatOptions o{2, 4, 4, 4};
  for (const std::string& f : kFormats) {
    Tensor a = to_format(x, f, f == "blocked_ell" ? FormatOptions::block(4) : o);
    Tensor t = sparse_transpose(a);
    EXPECT_EQ(t.format(), f == "csr" ? "csc" : f == "csc" ? "csr" : f);  // CSR/CSC: the free transpose
    EXPECT_EQ(t.shape(), (Shape{12, 8}));
    EXPECT_TRUE(exact_equal(to_dense(t), xt)) << f;
  }
  Tensor csr = to_format(x, "csr");
  EXPECT_EQ(pattern_version(sparse_transpose(csr)), pattern_version(csr));
  EXPECT_EQ(bsr_impl(sparse_transpose(to_format(x, "bsr", o)), "test").block_rows(), 4);
  EXPECT_ERROR_NAMING(sparse_transpose(to_format(testing::random_sparse({2, 2, 4}, 0.5, 1), "coo")),
                      "sparse_transpose: needs a 2-D tensor");
  // A 2:4 pattern that does not stay 2:4 along the other dim.
  Tensor two_four = f32({1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0}, {4, 4});
  EXPECT_ERROR_NAMING(sparse_transpose(to_format(two_four, "nm", FormatOptions::nm(2, 4))),
                      "sparse_transpose: group 0 of row 0 (last-dim positions 0..3) has 4 non-zeros, more than n = 2");
}

TEST(ConvertTest, RejectsBadRequests) {
  Tensor x = testing::random_sparse({6, 8}, 0.3, 4);
  EXPECT_ERROR_NAMING(to_format(x, "ellpack"), "to_format: unknown format 'ellpack' (expected one of dense, coo, csr");
  EXPECT_ERROR_NAMING(to_format(x, "bsr"),
                      "to_format: format 'bsr' needs a block shape (FormatOptions::block), and the source (format "
                      "'dense') has none");
  EXPECT_ERROR_NAMING(to_format(x, "bsr", FormatOptions::block(4, 4)),
                      "block shape [4, 4] does not divide the shape [6, 8]");
  EXPECT_ERROR_NAMING(to_format(to_format(x, "csr"), "bsr", FormatOptions::block(4, 4)),
                      "to_format: block shape [4, 4] does not divide the shape [6, 8]");
  EXPECT_ERROR_NAMING(to_format(x, "blocked_ell", FormatOptions::block(2, 4)),
                      "to_format: Blocked-ELL needs square blocks, got 2x4");
  EXPECT_ERROR_NAMING(to_format(x, "blocked_ell", FormatOptions::block(4)), "block shape [4, 4] does not divide");
  EXPECT_ERROR_NAMING(to_format(ones({2, 8}), "nm"),
                      "to_format: group 0 of row 0 (last-dim positions 0..3) has 4 non-zeros, more than n = 2");
  EXPECT_ERROR_NAMING(to_format(to_format(ones({2, 8}), "csr"), "nm", FormatOptions::nm(3, 4)),
                      "has 4 non-zeros, more than n = 3");
  EXPECT_ERROR_NAMING(to_format(x, "nm", FormatOptions::nm(2, 3)), "to_format: m = 3 does not divide the last dim");
  EXPECT_ERROR_NAMING(to_format(x, "nm", FormatOptions{0, 0, 2, 0}), "to_format: n:m needs both n and m");
  EXPECT_ERROR_NAMING(to_format(ones({4}, DType::kI32), "csr"), "format 'csr' needs a 2-D tensor");
  EXPECT_ERROR_NAMING(to_format(ones({2, 4}, DType::kI32), "csr"), "to_format: values must be floating point");
  EXPECT_ERROR_NAMING(to_format(scalar_tensor(1.0), "coo"), "format 'coo' needs at least one dimension");
}

TEST(ConvertTest, BlockOptionsDefaultToTheSource) {
  Tensor x = testing::random_sparse({8, 8}, 0.3, 6);
  Tensor bsr = to_format(x, "bsr", FormatOptions::block(4, 2));
  Tensor bsr2 = to_format(bsr, "bsr", FormatOptions::block(2, 2));
  EXPECT_EQ(bsr_impl(bsr2, "test").block_cols(), 2);
  EXPECT_EQ(bsr_impl(bsr2, "test").block_rows(), 2);
  EXPECT_TRUE(exact_equal(to_dense(bsr2), x));
  Tensor ell = to_format(bsr2, "blocked_ell");  // takes the 2x2 block
  EXPECT_EQ(blocked_ell_impl(ell, "test").block_size(), 2);
  EXPECT_EQ(bsr_impl(to_format(ell, "bsr"), "test").block_rows(), 2);
  Tensor nm = to_format(nm_decompress(nm_compress(x, 1, 4)), "nm", FormatOptions::nm(1, 4));
  EXPECT_EQ(nm_impl(to_format(nm, "nm"), "test").n(), 1);  // keeps 1:4
  EXPECT_TRUE(to_format(nm, "nm").is_same(nm));
}

TEST(ConvertTest, CpuCudaParity) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU in this machine: CPU-vs-CUDA parity of conversions not run";
  const Device gpu = Device::cuda();
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    for (double density : {0.0, 0.3, 1.0}) {
      FormatOptions o;
      Tensor x = case_data(c, density, seed++, DType::kF32, &o);
      for (const std::string& from : kFormats) {
        Tensor a_cpu = to_format(x, from, for_format(from, c, o));
        Tensor a_gpu = to_format(x.to(gpu), from, for_format(from, c, o));
        EXPECT_EQ(a_gpu.device(), gpu);
        EXPECT_TRUE(same_parts(to_device(a_gpu, Device::cpu()), a_cpu)) << from;
        for (const std::string& to : kFormats) {
          Tensor b_cpu = to_format(a_cpu, to, for_format(to, c, o));
          Tensor b_gpu = to_format(a_gpu, to, for_format(to, c, o));
          EXPECT_EQ(b_gpu.device(), gpu) << from << " -> " << to;
          EXPECT_TRUE(same_parts(to_device(b_gpu, Device::cpu()), b_cpu)) << from << " -> " << to;
          EXPECT_TRUE(exact_equal(to_dense(b_gpu).to(Device::cpu()), x)) << from << " -> " << to;
        }
      }
      // bf16 values and the transposes too.
      Tensor xb = x.to(DType::kBF16);
      Tensor csr = to_format(xb.to(gpu), "csr");
      EXPECT_TRUE(same_parts(to_device(csr_to_csc(csr), Device::cpu()), csr_to_csc(to_format(xb, "csr"))));
    }
  }
}

}  // namespace
}  // namespace coppice
