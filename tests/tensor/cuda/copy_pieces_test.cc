// CPU parity of PieceCopy (tensor/cuda/copy_pieces.cu against
// copy_pieces_on_host), through cat of contiguous tensors, which takes it:
// every dtype, odd byte lengths and addresses (the kernel's unit narrows to
// 1 byte), cats along an inner dim (rows), empty pieces and more pieces than
// one launch holds.
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

// cat of `parts` on the CPU and of GPU copies of them (each seen through `view`
// on both sides), compared bit for bit.
void expect_cat_parity(const std::vector<Tensor>& parts, int64_t dim, const std::string& what,
                       const std::function<Tensor(const Tensor&)>& view = nullptr) {
  std::vector<Tensor> cpu, gpu_parts;
  for (const Tensor& p : parts) {
    cpu.push_back(view ? view(p) : p);
    gpu_parts.push_back(view ? view(p.to(gpu())) : p.to(gpu()));
  }
  const Tensor got = cat(gpu_parts, dim);
  EXPECT_TRUE(got.device().is_cuda()) << what;
  expect_match(got, cat(cpu, dim), 0, 0, what);
}

TEST(CudaCopyPiecesTest, EveryDtypeAlongEachDim) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    const std::vector<Tensor> parts = {random({3, 5, 7}, t, 1), random({3, 2, 7}, t, 2), random({3, 9, 7}, t, 3)};
    expect_cat_parity(parts, 1, str_cat(dtype_name(t), " dim 1"));
    const std::vector<Tensor> rows = {random({4, 3}, t, 4), random({1, 3}, t, 5), random({6, 3}, t, 6)};
    expect_cat_parity(rows, 0, str_cat(dtype_name(t), " dim 0"));
    const std::vector<Tensor> cols = {random({4, 3}, t, 7), random({4, 1}, t, 8), random({4, 5}, t, 9)};
    expect_cat_parity(cols, -1, str_cat(dtype_name(t), " last dim"));
  }
}

TEST(CudaCopyPiecesTest, OddLengthsAndAddresses) {
  COPPICE_REQUIRE_GPU();
  // u8 pieces of odd lengths, each starting one byte into its storage.
  std::vector<Tensor> parts;
  for (int64_t n : {1, 7, 33, 4096 + 3, 15}) parts.push_back(random({n + 1}, DType::kU8, 10 + n));
  expect_cat_parity(parts, 0, "u8 odd", [](const Tensor& x) { return x.narrow(0, 1, x.size(0) - 1); });
  // bf16 flat gradients of a bucket: a multiple of 8 elements or not.
  std::vector<Tensor> grads;
  for (int64_t n : {1024 * 1024, 768, 3 * 1024, 5, 4096 * 4 + 2}) grads.push_back(random({n}, DType::kBF16, 20 + n));
  expect_cat_parity(grads, 0, "bf16 bucket");
}

TEST(CudaCopyPiecesTest, EmptyPiecesAndManyPieces) {
  COPPICE_REQUIRE_GPU();
  const std::vector<Tensor> with_empty = {random({0, 4}, DType::kF32, 30), random({2, 4}, DType::kF32, 31),
                                          random({0, 4}, DType::kF32, 32), random({3, 4}, DType::kF32, 33)};
  expect_cat_parity(with_empty, 0, "empty pieces");
  expect_cat_parity({random({0}, DType::kF32, 34)}, 0, "all empty");
  std::vector<Tensor> many;  // two launches and a bit: the table holds 64 pieces
  for (int64_t k = 0; k < 150; ++k) many.push_back(random({1 + (k * 37) % 301}, DType::kF32, 40 + k));
  expect_cat_parity(many, 0, "150 pieces");
  std::vector<Tensor> many_rows;
  for (int64_t k = 0; k < 70; ++k) many_rows.push_back(random({3, 1 + k % 5}, DType::kF16, 300 + k));
  expect_cat_parity(many_rows, 1, "70 pieces along dim 1");
}

// copy_into_at (a data-parallel bucket filled with the gradients backward
// did not write there): pieces at scattered offsets, the rest untouched, the
// same bytes as on the CPU.
TEST(CudaCopyPiecesTest, PiecesIntoABufferAtOffsets) {
  COPPICE_REQUIRE_GPU();
  for (DType t : {DType::kBF16, DType::kF32}) {
    const std::vector<Tensor> pieces = {random({1024}, t, 70), random({3, 5}, t, 71), random({4096 + 8}, t, 72)};
    const std::vector<int64_t> offsets = {0, 2048, 4096};
    Tensor cpu_out = full({4096 + 4096 + 8 + 5}, -2.0, t);
    Tensor gpu_out = cpu_out.to(gpu());
    copy_into_at(cpu_out, pieces, offsets);
    copy_into_at(gpu_out, {pieces[0].to(gpu()), pieces[1].to(gpu()), pieces[2].to(gpu())}, offsets);
    expect_match(gpu_out, cpu_out, 0, 0, std::string(dtype_name(t)));
  }
}

}  // namespace
}  // namespace coppice
