// CPU parity of the embedding_bag kernel (tensor/cuda/embedding_bag.cu, the
// twin of tensor/cpu/embedding_bag.cc): bit for bit in every floating dtype,
// sum, mean and max (with its positions), per-sample weights, padding, empty bags; the same bits on a
// second run; the range check naming the index and its position.
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

Attrs bag_attrs(const std::string& mode, int64_t padding) {
  Attrs a;
  a.set("mode", mode).set("padding_idx", padding);
  return a;
}

// 40 bags over 300 entries of 50 embeddings, some bags empty, every third entry 7.
struct Bags {
  Tensor indices, offsets;
};
Bags bags() {
  std::vector<double> ix = noise(300, 41, 0, 50);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = i % 3 == 0 ? 7 : std::floor(ix[i]);
  std::vector<double> off = {0};
  for (int b = 1; b < 40; ++b) off.push_back(b % 5 == 0 ? off.back() : std::min(300.0, off.back() + 9));
  off.push_back(300);
  return {make({300}, ix, DType::kI64), make({static_cast<int64_t>(off.size())}, off, DType::kI64)};
}

TEST(CudaEmbeddingBagTest, MatchesTheCpuBitForBit) {
  COPPICE_REQUIRE_GPU();
  const Bags b = bags();
  for (DType t : floating_dtypes()) {
    const Tensor w = random({50, 37}, t, 42), psw = random({300}, t, 43);
    for (std::string mode : {"sum", "mean", "max"}) {
      for (int64_t padding : {int64_t{-1}, int64_t{7}}) {
        const std::string what = str_cat(dtype_name(t), " ", mode, " padding ", padding);
        expect_parity(op::kEmbeddingBag, {w, b.indices, b.offsets, Tensor()}, bag_attrs(mode, padding), 0, 0, what);
        if (mode == "sum") {
          expect_parity(op::kEmbeddingBag, {w, b.indices, b.offsets, psw}, bag_attrs(mode, padding), 0, 0,
                        what + " weighted");
        }
      }
    }
  }
}

TEST(CudaEmbeddingBagTest, SameBitsEveryRunAndTheFrontendOnTheGpu) {
  COPPICE_REQUIRE_GPU();
  const Bags b = bags();
  const Tensor w = random({50, 64}, DType::kF32, 44).to(gpu());
  EmbeddingBagOptions o;
  o.offsets = b.offsets.to(gpu());
  o.include_last_offset = true;
  o.mode = BagMode::kMean;
  o.padding_idx = 7;
  const Tensor first = embedding_bag(w, b.indices.to(gpu()), o);
  expect_match(embedding_bag(w, b.indices.to(gpu()), o), first, 0, 0, "second run");
  expect_match(first,
               embedding_bag(w.to(Device::cpu()), b.indices,
                             [&] {
                               EmbeddingBagOptions c = o;
                               c.offsets = b.offsets;
                               return c;
                             }()),
               0, 0, "frontend");
  // The gradient pieces run on the GPU too and match the CPU's.
  const EmbeddingBags gb = embedding_bags(w, b.indices.to(gpu()), o);
  EmbeddingBagOptions c = o;
  c.offsets = b.offsets;
  const EmbeddingBags cb = embedding_bags(w.to(Device::cpu()), b.indices, c);
  const Tensor g = random({40, 64}, DType::kF32, 45);
  expect_match(embedding_backward(embedding_bag_entry_grads(g.to(gpu()), gb), gb.indices, 50),
               embedding_backward(embedding_bag_entry_grads(g, cb), cb.indices, 50), 0, 0, "weight gradient");
}

TEST(CudaEmbeddingBagTest, IndexOutOfRangeNamesIt) {
  COPPICE_REQUIRE_GPU();
  const Tensor w = zeros({5, 4}, TensorOptions(DType::kF32, gpu()));
  EmbeddingBagOptions o;
  o.offsets = make({1}, {0}, DType::kI64).to(gpu());
  expect_error(
      [&] {
        (void)embedding_bag(w, make({3}, {1, 2, 5}, DType::kI64).to(gpu()), o).to(Device::cpu());
      },
      "embedding_bag: index 5 (at position 2) is out of range for dim 0 of size 5");
}

}  // namespace
}  // namespace coppice
