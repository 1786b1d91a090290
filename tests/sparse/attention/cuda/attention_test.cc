// Attention on CUDA (sparse/attention/cuda/attention.cu) against its CPU twin on the
// same inputs: out, lse, dq, dk and dv; the tiled tensor-core kernels (bf16,
// f16; head sizes 64 and 128) and the row kernels (f32, f64, other head
// sizes); no mask, causal, block patterns (empty query blocks, unseen key
// blocks, blocks of two tiles) and both; lengths of 1, a tile, and not a
// multiple of the tile; strided operands; repeated runs give the same bits;
// on a Hopper GPU, both head sizes on its wgmma kernels and on mma.sync.
//
// Tolerances: the tiled kernels round p and ds to the input's 16-bit type
// before their products (as FlashAttention does), so a bf16 result may differ
// from the f32 twin by about 2^-8 of the largest value it sums; we allow 2 %
// of the largest magnitude of each result (f16: 0.5 %). The row kernels
// compute as the twin does, in another order: 1e-5 (f32) and 1e-12 (f64).
#include "sparse/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sparse/attention/block_walks.h"
#include "sparse/route_choices.h"
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

// |got - want| <= tol * max|want| everywhere (the same -inf where want is -inf).
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(shape_to_string(got.shape()), shape_to_string(want.shape())) << what;
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want);
  double scale = 0;
  for (double x : w) scale = std::isfinite(x) ? std::max(scale, std::abs(x)) : scale;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const bool ok = std::isinf(w[i]) ? g[i] == w[i] : std::abs(g[i] - w[i]) <= tol * std::max(scale, 1e-3);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i] << " (largest " << scale
                    << ")";
    }
  }
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 2e-2;
    case DType::kF16: return 5e-3;
    case DType::kF32: return 1e-5;
    default: return 1e-12;
  }
}

struct Case {
  DType dtype;
  int64_t n, t, d;
  bool causal;
  int64_t block;             // 0: no layout
  bool rising_keys = false;  // keys growing tile by tile (rising_keys below)
};

std::string name_of(const Case& c) {
  return str_cat(dtype_name(c.dtype), " n ", c.n, " t ", c.t, " d ", c.d, c.causal ? " causal" : "",
                 c.block ? str_cat(" block ", c.block) : "", c.rising_keys ? " rising keys" : "");
}

// k with the keys of tile i (64 tokens) scaled by {1, 1.5, 6.5, 7, 12, ...}[i]:
// a row's max rises along its walk, from tile to tile by a little and by a
// lot (2^20 and more in p's scale) in turn, so the forward's online softmax
// rescales o by factors near 1 and by factors that flush it to zero.
Tensor rising_keys(const Tensor& k) {
  const int64_t t = k.size(1), d = k.size(2);
  std::vector<double> v = values(k);
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t tile = (static_cast<int64_t>(i) / d % t) / 64;
    v[i] *= static_cast<double>(tile / 2) * 5.5 + (tile % 2 ? 1.5 : 1.0);
  }
  return from_vector(v, k.shape()).to(k.dtype());
}

// A layout with an empty query block (1), a key block nobody sees (the last
// but one, where there are three or more), the diagonal elsewhere and every
// third block besides.
std::vector<bool> layout_keep(int64_t blocks) {
  std::vector<bool> keep(static_cast<size_t>(blocks * blocks), false);
  for (int64_t i = 0; i < blocks; ++i) {
    if (i == 1) continue;
    for (int64_t j = 0; j < blocks; ++j) {
      if (blocks >= 3 && j == blocks - 2) continue;
      keep[static_cast<size_t>(i * blocks + j)] = i == j || j % 3 == 0;
    }
  }
  return keep;
}

void check_case(const Case& c, uint64_t& seed) {
  SCOPED_TRACE(name_of(c));
  const Shape shape{c.n, c.t, c.d};
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const Tensor q = random(shape, c.dtype, seed++);
  Tensor k = random(shape, c.dtype, seed++);
  if (c.rising_keys) k = rising_keys(k);
  const Tensor v = random(shape, c.dtype, seed++), dout = random(shape, c.dtype, seed++);
  AttentionMask cpu_mask{c.causal, {}}, gpu_mask{c.causal, {}};
  if (c.block > 0) {
    const int64_t blocks = (c.t + c.block - 1) / c.block;
    cpu_mask.blocks = attention_block_pattern(layout_keep(blocks), c.block, Device::cpu());
    gpu_mask.blocks = attention_block_pattern(layout_keep(blocks), c.block, gpu());
  }
  const AttentionOutput want = attention_forward(q, k, v, scale, cpu_mask);
  const Tensor qg = q.to(gpu()), kg = k.to(gpu()), vg = v.to(gpu()), dg = dout.to(gpu());
  const AttentionOutput got = attention_forward(qg, kg, vg, scale, gpu_mask);
  const double tol = tolerance(c.dtype);
  expect_close(got.out, want.out, tol, "out");
  expect_close(got.lse, want.lse, c.dtype == DType::kF64 ? 1e-12 : 1e-5, "lse");

  // The backward pass from the same out and lse on both devices.
  const AttentionGrads gw = attention_backward(q, k, v, want.out, want.lse, dout, scale, cpu_mask);
  const AttentionGrads gg = attention_backward(qg, kg, vg, want.out.to(gpu()), want.lse.to(gpu()), dg, scale, gpu_mask);
  expect_close(gg.dq, gw.dq, tol, "dq");
  expect_close(gg.dk, gw.dk, tol, "dk");
  expect_close(gg.dv, gw.dv, tol, "dv");

  // No atomics: a second run gives the same bits, forward and backward.
  const AttentionOutput got_again = attention_forward(qg, kg, vg, scale, gpu_mask);
  EXPECT_EQ(values(got_again.out.to(Device::cpu())), values(got.out.to(Device::cpu())));
  EXPECT_EQ(values(got_again.lse.to(Device::cpu())), values(got.lse.to(Device::cpu())));
  const AttentionGrads again =
      attention_backward(qg, kg, vg, want.out.to(gpu()), want.lse.to(gpu()), dg, scale, gpu_mask);
  EXPECT_EQ(values(again.dq.to(Device::cpu())), values(gg.dq.to(Device::cpu())));
  EXPECT_EQ(values(again.dk.to(Device::cpu())), values(gg.dk.to(Device::cpu())));
  EXPECT_EQ(values(again.dv.to(Device::cpu())), values(gg.dv.to(Device::cpu())));
}

// On a Hopper GPU the tiled kernels run on wgmma (attention_sm90.cu), its
// dq from dk/dv's ds tiles or, pinned, forming ds again; with the pin
// attention=mma_sync they run on the mma.sync ones every GPU runs: all three
// are checked; elsewhere the pins change nothing.
TEST(CudaAttentionTest, TiledKernelsMatchTheCpu) {
  COPPICE_REQUIRE_GPU();
  for (const char* pins : {"", "attention_dq=recompute", "attention=mma_sync"}) {
    SCOPED_TRACE(*pins ? pins : "wgmma where the GPU has it");
    ScopedRoutePins kernels(pins);
    uint64_t seed = 11;
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t d : {64, 128}) {
        for (int64_t t : {1, 64, 100, 257}) {
          for (bool causal : {false, true}) {
            for (int64_t block : {int64_t{0}, int64_t{64}, int64_t{128}}) {
              check_case({dtype, 3, t, d, causal, block}, seed);
            }
          }
        }
      }
    }
    for (int64_t d : {64, 128}) {
      // Longer walks: ten tiles of queries and of keys.
      check_case({DType::kBF16, 2, 613, d, true, 0}, seed);
      check_case({DType::kBF16, 2, 613, d, false, 0}, seed);
      // More thread blocks than a GPU holds at once.
      check_case({DType::kBF16, 256, 160, d, true, 0}, seed);
      check_case({DType::kF16, 256, 160, d, false, 0}, seed);
      // Rows whose max rises along the walk, by a little and by a lot.
      for (bool causal : {false, true}) check_case({DType::kBF16, 2, 320, d, causal, 0, true}, seed);
    }
  }
}

// The wgmma backward's ds tiles over slices of the heads (T 1024 causal:
// 1.1 MB a head, 240 heads a slice, so 250 heads take two): every head's
// gradients are the bits it computed in a launch of its own, and dq agrees
// with the one that forms ds again.
TEST(CudaAttentionTest, BackwardOverSlicesOfHeads) {
  COPPICE_REQUIRE_GPU();
  const int64_t n = 250, t = 1024, d = 64, part = 8;
  const Shape shape{n, t, d};
  const Tensor q = random(shape, DType::kBF16, 31).to(gpu()), k = random(shape, DType::kBF16, 32).to(gpu()),
               v = random(shape, DType::kBF16, 33).to(gpu()), dout = random(shape, DType::kBF16, 34).to(gpu());
  const AttentionMask mask{true, {}};
  const AttentionOutput f = attention_forward(q, k, v, 0.125, mask);
  const AttentionGrads all = attention_backward(q, k, v, f.out, f.lse, dout, 0.125, mask);
  for (int64_t h0 : {int64_t{0}, int64_t{238}}) {
    SCOPED_TRACE(str_cat("heads ", h0, ".."));
    auto heads = [&](const Tensor& x) { return x.narrow(0, h0, part); };
    const AttentionGrads alone =
        attention_backward(heads(q), heads(k), heads(v), heads(f.out), heads(f.lse), heads(dout), 0.125, mask);
    EXPECT_EQ(values(alone.dq.to(Device::cpu())), values(heads(all.dq).to(Device::cpu())));
    EXPECT_EQ(values(alone.dk.to(Device::cpu())), values(heads(all.dk).to(Device::cpu())));
    EXPECT_EQ(values(alone.dv.to(Device::cpu())), values(heads(all.dv).to(Device::cpu())));
  }
  ScopedRoutePins recompute("attention_dq=recompute");
  const AttentionGrads again = attention_backward(q, k, v, f.out, f.lse, dout, 0.125, mask);
  expect_close(all.dq, again.dq.to(Device::cpu()), 1e-2, "dq");
  EXPECT_EQ(values(again.dk.to(Device::cpu())), values(all.dk.to(Device::cpu())));
}

// On the route of ds tiles at head size 64, where the walks are short (T 1
// and 100, and the layouts here), the wgmma dk/dv forms the row deltas from
// out's and dout's tiles; forming ds again, it reads the row-delta
// kernel's. Both sum in one order (attention_tiles.cuh's row_delta), so dk
// is the same bits either way, and dv, which no delta touches: over rows
// past t, masks, layouts, and an out laid out as a view.
TEST(CudaAttentionTest, DkdvFormsTheRowDeltasBitForBit) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 41;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t t : {1, 100, 257}) {
      for (bool causal : {false, true}) {
        for (int64_t block : {int64_t{0}, int64_t{64}}) {
          SCOPED_TRACE(name_of({dtype, 3, t, 64, causal, block}));
          const Shape shape{3, t, 64};
          const Tensor q = random(shape, dtype, seed++).to(gpu()), k = random(shape, dtype, seed++).to(gpu()),
                       v = random(shape, dtype, seed++).to(gpu());
          // dout and out as the first halves of wider rows: strided tokens, as a view leaves them.
          const Tensor dout = random({3, t, 128}, dtype, seed++).to(gpu()).narrow(2, 0, 64);
          AttentionMask mask{causal, {}};
          if (block > 0) mask.blocks = attention_block_pattern(layout_keep((t + block - 1) / block), block, gpu());
          const AttentionOutput f = attention_forward(q, k, v, 0.125, mask);
          Tensor out = Tensor::empty({3, t, 128}, TensorOptions(dtype, gpu())).narrow(2, 0, 64);
          out.copy_(f.out);
          auto grads = [&](const char* pin) {
            ScopedRoutePins route(pin);
            return attention_backward(q, k, v, out, f.lse, dout, 0.125, mask);
          };
          const AttentionGrads tiles = grads("attention_dq=tiles"), recompute = grads("attention_dq=recompute");
          EXPECT_EQ(values(tiles.dk.to(Device::cpu())), values(recompute.dk.to(Device::cpu())));
          EXPECT_EQ(values(tiles.dv.to(Device::cpu())), values(recompute.dv.to(Device::cpu())));
        }
      }
    }
  }
}

// A layout that keeps no block: every query sees no key (out 0, lse -inf)
// and every gradient is 0, as on the CPU; the wgmma backward's ds tiles
// then take no bytes at all.
TEST(CudaAttentionTest, LayoutOfNoBlocks) {
  COPPICE_REQUIRE_GPU();
  for (int64_t d : {64, 128}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(str_cat("d ", d, causal ? " causal" : ""));
      const Shape shape{2, 100, d};
      const Tensor q = random(shape, DType::kBF16, 51).to(gpu()), k = random(shape, DType::kBF16, 52).to(gpu()),
                   v = random(shape, DType::kBF16, 53).to(gpu()), dout = random(shape, DType::kBF16, 54).to(gpu());
      const AttentionMask mask{causal, attention_block_pattern({false, false, false, false}, 64, gpu())};
      const AttentionOutput f = attention_forward(q, k, v, 0.125, mask);
      for (double x : values(f.out.to(Device::cpu()))) ASSERT_EQ(x, 0.0);
      for (double x : values(f.lse.to(Device::cpu()))) ASSERT_EQ(x, -INFINITY);
      const AttentionGrads g = attention_backward(q, k, v, f.out, f.lse, dout, 0.125, mask);
      for (const Tensor* t : {&g.dq, &g.dk, &g.dv}) {
        for (double x : values(t->to(Device::cpu()))) ASSERT_EQ(x, 0.0);
      }
    }
  }
}

TEST(CudaAttentionTest, RowKernelsMatchTheCpu) {
  COPPICE_REQUIRE_GPU();
  uint64_t seed = 23;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (int64_t d : {1, 40}) {  // bf16 with these head sizes takes the row kernels too
      for (int64_t t : {1, 37, 130}) {
        for (bool causal : {false, true}) {
          for (int64_t block : {int64_t{0}, int64_t{16}}) check_case({dtype, 2, t, d, causal, block}, seed);
        }
      }
    }
  }
  // A layout block that is not whole tiles sends bf16 of head size 64 to the row kernels.
  check_case({DType::kBF16, 2, 100, 64, true, 32}, seed);
}

TEST(CudaAttentionTest, StridedOperands) {
  COPPICE_REQUIRE_GPU();
  // q, k, v as views of one [N, T, 3, d] tensor, as a model's qkv projection gives them.
  const Tensor qkv = random({2, 70, 3, 64}, DType::kBF16, 5).to(gpu());
  const Tensor q = qkv.select(2, 0), k = qkv.select(2, 1), v = qkv.select(2, 2);
  const AttentionOutput got = attention_forward(q, k, v, 0.125, {true, {}});
  const AttentionOutput want =
      attention_forward(q.to(Device::cpu()), k.to(Device::cpu()), v.to(Device::cpu()), 0.125, {true, {}});
  expect_close(got.out, want.out, tolerance(DType::kBF16), "out");
}

// A packed qkv [B, T, 3, H, d] (a projection's layout: rows 3 H d apart)
// through the tiled kernels: out and dqkv as the CPU gives them.
TEST(CudaAttentionTest, PackedQkv) {
  COPPICE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor qkv = random({2, 130, 3, 4, 64}, dtype, 21), dout = random({2, 130, 4, 64}, dtype, 22);
    const AttentionMask mask{true, {}};
    const AttentionOutput want = attention_forward_packed(qkv, 0.125, mask);
    const AttentionOutput got = attention_forward_packed(qkv.to(gpu()), 0.125, mask);
    expect_close(got.out, want.out, tolerance(dtype), "out");
    const Tensor dw = attention_backward_packed(qkv, want.out, want.lse, dout, 0.125, mask);
    const Tensor dg =
        attention_backward_packed(qkv.to(gpu()), want.out.to(gpu()), want.lse.to(gpu()), dout.to(gpu()), 0.125, mask);
    expect_close(dg, dw, tolerance(dtype), "dqkv");
  }
}

// Operands repeated by expand ([B, T, H, d] views whose head, batch or
// token stride is 0, as grouped-query attention shares k and v across
// heads): out and the gradients as the CPU gives them, forward and backward.
// On a Hopper GPU the wgmma kernels map a repeated head or batch as one entry
// of TMA's tensor; a repeated token cannot be mapped and takes mma.sync.
TEST(CudaAttentionTest, ExpandedOperands) {
  COPPICE_REQUIRE_GPU();
  const int64_t b = 2, t = 130, h = 4, d = 64;
  const Shape full{b, t, h, d};
  const Tensor q = random(full, DType::kBF16, 41), dout = random(full, DType::kBF16, 42);
  struct Repeat {
    const char* what;
    Shape stored;
  };
  for (const Repeat& r :
       {Repeat{"a head", {b, t, 1, d}}, Repeat{"a batch entry", {1, t, h, d}}, Repeat{"a token", {b, 1, h, d}}}) {
    SCOPED_TRACE(str_cat("k and v repeat ", r.what));
    const Tensor ks = random(r.stored, DType::kBF16, 43), vs = random(r.stored, DType::kBF16, 44);
    const Tensor k = ks.expand(full), v = vs.expand(full);
    const Tensor kg = ks.to(gpu()).expand(full), vg = vs.to(gpu()).expand(full);
    for (bool causal : {false, true}) {
      const AttentionMask mask{causal, {}};
      const AttentionOutput want = attention_forward(q, k, v, 0.125, mask);
      const AttentionOutput got = attention_forward(q.to(gpu()), kg, vg, 0.125, mask);
      expect_close(got.out, want.out, tolerance(DType::kBF16), "out");
      const AttentionGrads gw = attention_backward(q, k, v, want.out, want.lse, dout, 0.125, mask);
      const AttentionGrads gg =
          attention_backward(q.to(gpu()), kg, vg, want.out.to(gpu()), want.lse.to(gpu()), dout.to(gpu()), 0.125, mask);
      expect_close(gg.dq, gw.dq, tolerance(DType::kBF16), "dq");
      expect_close(gg.dk, gw.dk, tolerance(DType::kBF16), "dk");
      expect_close(gg.dv, gw.dv, tolerance(DType::kBF16), "dv");
    }
  }
}

TEST(CudaAttentionTest, APatternOnTheWrongDeviceIsRefused) {
  COPPICE_REQUIRE_GPU();
  const Tensor q = zeros({1, 64, 64}, TensorOptions(DType::kBF16, gpu()));
  AttentionMask mask{false, attention_block_pattern({true}, 64, Device::cpu())};
  EXPECT_ERROR_NAMING(attention_forward(q, q, q, 1.0, mask), "the block pattern must be on cuda:0, got cpu");
}

// A device pattern's walks (its indices read back once) are the CPU's.
TEST(CudaAttentionTest, DeviceWalksAreTheHosts) {
  COPPICE_REQUIRE_GPU();
  const std::vector<bool> keep{true, false, true, true, true, false, false, true, true};
  const auto want = attention_block_walks(attention_block_pattern(keep, 64, Device::cpu()));
  const auto got = attention_block_walks(attention_block_pattern(keep, 64, gpu()));
  const std::vector<Tensor> got_parts = got->in_order(), want_parts = want->in_order();
  ASSERT_EQ(got_parts.size(), want_parts.size());
  for (size_t i = 0; i < got_parts.size(); ++i) {
    EXPECT_EQ(got_parts[i].device(), gpu());
    EXPECT_EQ(got_parts[i].to_vector<int32_t>(), want_parts[i].to_vector<int32_t>());
  }
}

}  // namespace
}  // namespace coppice
