// Attention's tiled kernels on Hopper's warpgroup MMA (wgmma, sm_90a only),
// for head sizes 64 and 128: the same kernels and arguments as attention.cu's
// mma.sync ones (forward; dk/dv by key tile; dq by query tile), which
// attention.cu launches in their place on devices of compute capability 9.0
// (the code is built for sm_90a alone), and a second dq that multiplies the
// ds tiles dk/dv stored instead of forming ds again. attention_sm90.cu has
// the design.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sparse/attention/cuda/attention_tiles.cuh"

namespace coppice::cuda {

// The kernels for T (__nv_bfloat16 or __half) and head size D (64 or 128),
// their shared memory and block size; each thread block takes
// kSm90AttentionTile queries (forward, dq) or keys (dk/dv) of one head
// (blockIdx.y + n_offset).
constexpr int kSm90AttentionTile = 64;
constexpr int kSm90AttentionThreads = 128;
// The backward passes ds from dk/dv to dq through global memory: a tile of
// 64 x 64 16-bit values for each (key tile, query tile) pair a head's walks
// may visit (FlashArgs::ds_head_tiles of them, which attention.cu counts),
// FlashArgs::ds, which the launcher allocates for a slice of the heads.
constexpr int kSm90DsTileBytes = kSm90AttentionTile * kSm90AttentionTile * 2;

// An operand's tensor map, through which the kernels' tiles arrive (TMA):
// its [batch, t, heads, D] elements (HeadStrides) as a 4-D tensor, boxes of
// 64 tokens by 64 columns in the 128-byte swizzle (a tile of 128-wide rows is
// two boxes), zeros past t. A head or batch dimension of stride 0 (an
// operand repeated by expand) is mapped one entry long, and its coordinate
// is 0 for every head (heads_dim, batch_dim: the mapped lengths).
struct Sm90TileMap {
  CUtensorMap map;
  int32_t heads_dim = 1, batch_dim = 1;
};
struct Sm90Maps {
  Sm90TileMap q, k, v, dout;  // dout: the backward's alone
  // The outputs, which each kernel's write-out stores through as its last
  // tiles (TMA clips the rows past t): the forward's o, the backward's dq
  // (either kernel's), dk and dv. The backward's o maps the forward's
  // output (FlashArgs::out), which dk/dv may read to form the row deltas.
  Sm90TileMap o, dq, dk, dv;
};
// Whether TMA can map an operand: its tokens are apart (a stride of 0 along
// t, possible through expand, cannot be mapped; the mma.sync kernels take it).
inline bool sm90_mappable(const HeadStrides& s, int64_t t) { return s.token != 0 || t == 1; }
// The map of n heads (`heads` a batch entry) of t tokens by d (64 or 128)
// columns of T at `data`; `op` names the caller in errors.
template <typename T>
Sm90TileMap sm90_tile_map(const void* data, const HeadStrides& s, int64_t n, int64_t heads, int64_t t, int d,
                          std::string_view op);

struct Sm90AttentionKernels {
  void (*forward)(FlashArgs, Sm90Maps);
  void (*dkdv)(FlashArgs, Sm90Maps);  // reading the row deltas (FlashArgs::delta)
  // Forming them from out (Sm90Maps::o) and dout, for the route of ds
  // tiles, where nothing else reads them; null where the shared memory for
  // out's tiles is lacking (head size 128).
  void (*dkdv_forming_deltas)(FlashArgs, Sm90Maps) = nullptr;
  void (*dq)(FlashArgs, Sm90Maps);            // from the ds tiles dk/dv wrote
  void (*dq_recompute)(FlashArgs, Sm90Maps);  // forming ds again, for heads whose tiles take too much memory
  size_t forward_smem, dkdv_smem, dkdv_forming_deltas_smem, dq_smem, dq_recompute_smem;
};
template <typename T, int D>
Sm90AttentionKernels sm90_attention_kernels();

}  // namespace coppice::cuda
