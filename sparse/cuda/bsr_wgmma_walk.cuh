// How the persistent wgmma BSR products (bsr_wgmma.cu's for 64x64 and
// 128x128 blocks, bsr_wgmma32.cu's for 32x32) walk their tiles: a tile is
// one output block row by a run of tokens, thread block b of the grid takes
// tiles b, b + grid, ..., and what each tile needs to know before its first
// copy is read 32 tiles at a time. Device code for sm_90a sources, and the
// grid's size on the host.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string_view>

#include "sparse/cuda/bsr_tiles.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"

namespace coppice::sparse_cuda {

// Tile `tile` of the launch (p.out_block_rows output block rows by the
// token tiles): its block row (in the row order, when there is one) and first
// token.
struct TileAt {
  int64_t obr, n0;
};
template <typename T>
__device__ __forceinline__ TileAt tile_at(const BsrProductArgs<T>& p, int64_t tile, int tile_n) {
  const int64_t i = tile % p.out_block_rows;
  return {p.row_order != nullptr ? p.row_order[i] : i, tile / p.out_block_rows * tile_n};
}

// What a tile needs to know before its first copy or product: its block
// row, first token and range of stored blocks, and for the loader the first
// two blocks' ids and block columns (valid where the range holds them).
struct TileWork {
  int32_t obr, n0, begin, end;
  int32_t blk[2], kblk[2];
};

// visit(turn, work) for each of the thread block's tiles in order (b, b +
// grid, ...; turn 0, 1, ...), called by every lane of a warp alike (the
// blocks' ids read only with kBlocks). The
// tiles' TileWork is read 32 at a time, lane l reading the l-th's, and handed
// round by shuffles: read one tile after another, the chain of dependent
// reads (row order, then the row's range, then its blocks) took longer than
// a tile of a short block row takes to multiply and write out (a 64x64
// block row of a 1024-wide weight at 90 % holds 1.6 blocks).
template <bool kBlocks, typename T, typename Visit>
__device__ __forceinline__ void for_each_tile(const BsrProductArgs<T>& p, int64_t tiles, int tile_n, Visit&& visit) {
  const int lane = threadIdx.x % 32;
  const int64_t grid = gridDim.x;
  int64_t turn = 0;
  for (int64_t first = blockIdx.x; first < tiles; first += 32 * grid) {
    const int64_t tile = first + lane * grid;
    TileWork mine{};
    if (tile < tiles) {
      const TileAt at = tile_at(p, tile, tile_n);
      mine.obr = static_cast<int32_t>(at.obr);
      mine.n0 = static_cast<int32_t>(at.n0);
      mine.begin = p.ptr[at.obr];
      mine.end = p.ptr[at.obr + 1];
#pragma unroll
      for (int k = 0; k < (kBlocks ? 2 : 0); ++k) {
        const int32_t e = mine.begin + k;
        if (e < mine.end) {
          mine.blk[k] = p.bid != nullptr ? p.bid[e] : e;
          mine.kblk[k] = p.kblk[e];
        }
      }
    }
    const int count = static_cast<int>(std::min<int64_t>(32, (tiles - first + grid - 1) / grid));
    for (int i = 0; i < count; ++i, ++turn) {
      TileWork w;
      w.obr = __shfl_sync(0xffffffffu, mine.obr, i);
      w.n0 = __shfl_sync(0xffffffffu, mine.n0, i);
      w.begin = __shfl_sync(0xffffffffu, mine.begin, i);
      w.end = __shfl_sync(0xffffffffu, mine.end, i);
#pragma unroll
      for (int k = 0; k < (kBlocks ? 2 : 0); ++k) {
        w.blk[k] = __shfl_sync(0xffffffffu, mine.blk[k], i);
        w.kblk[k] = __shfl_sync(0xffffffffu, mine.kblk[k], i);
      }
      visit(turn, w);
    }
  }
}

// The persistent product's thread blocks for `tiles` tiles over `rows` output
// block rows: `per_sm` an SM, less the fewest that make the count coprime
// with `rows`. Thread block b takes tiles b, b + grid, ..., so it meets the
// block rows (sorted longest first) at steps of grid mod rows: with a common
// factor it met only a fixed subset of them (132 SMs and 16 block rows: every
// fourth, longest or shortest), and the thread blocks' work came out unequal.
inline int64_t persistent_grid(int64_t tiles, int64_t rows, int per_sm, std::string_view op) {
  int64_t grid = int64_t{per_sm} * cuda::sm_count(cuda::current_device(op), op);
  while (grid > 1 && std::gcd(grid, rows) != 1) --grid;
  return std::min(tiles, grid);
}

}  // namespace coppice::sparse_cuda
