// reduce_sum, reduce_max and reduce_min over the rows of [outer, r]
// (kernels.h), twins of tensor/cpu/reduce.cc.
//
// A row (or a segment of one) is reduced by a group of threads: one warp when
// it is short, the whole 256-thread block when it is long. Each thread strides
// through its segment, then the group combines its partials in a fixed tree.
// When there are too few rows to fill the GPU (a sum over a whole tensor is
// one row), rows are cut into fixed segments, reduced in two passes. The
// launch shape depends only on the tensor's shape, so results are
// deterministic run to run; float sums add in another order than the CPU's
// (equal to rounding). Sums accumulate in f32 for bf16/f16 and in i64 for
// integers and bool (wrapping). max/min keep the first index among equal
// values and let NaN win (the first NaN), which equals the CPU's left-to-right
// scan exactly.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/column_totals.cuh"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/warp.cuh"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

constexpr int64_t kLongRow = 1024;       // segments at least this long get a whole block
constexpr int64_t kChunk = 4096;         // the shortest segment a long row is cut into
constexpr int64_t kTargetBlocks = 1024;  // enough blocks to fill an H100 a few times over

// The rows of [outer, r], each cut into `chunks` segments of `len` elements
// (the last one shorter); segment s is chunk s % chunks of row s / chunks.
struct Segments {
  int64_t outer, r, chunks, len;
};

Segments plan(int64_t outer, int64_t r) {
  int64_t chunks = 1;
  if (r >= 2 * kChunk) chunks = std::clamp<int64_t>(kTargetBlocks / std::max<int64_t>(outer, 1), 1, r / kChunk);
  return {outer, r, chunks, (r + chunks - 1) / chunks};
}

int group_for(int64_t len) { return len >= kLongRow ? kThreads : kWarp; }

unsigned blocks_for(const Segments& s, int group) { return grid_for(s.outer * s.chunks, kThreads / group); }

template <typename T>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, int64_t>;

template <typename A>
__device__ inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}

// Sums `v` over the `group` threads of a segment (a warp or the whole block);
// every thread of the group calls it; the result is valid in its first thread.
template <typename A>
__device__ A group_sum(A v, int group) {
  for (int d = kWarp / 2; d > 0; d /= 2) v = add(v, shfl_down(v, d));
  if (group == kWarp) return v;
  __shared__ A partial[kThreads / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // `partial` may still be read for the previous segment
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / kWarp ? partial[lane] : A(0);
    for (int d = kWarp / 2; d > 0; d /= 2) v = add(v, shfl_down(v, d));
  }
  return v;
}

// out[s] = the sum of segment s.
template <typename T, typename Out>
__global__ void sum_segments(const T* x, Out* out, Segments seg, int group) {
  using A = sum_acc_t<T>;
  const int per_block = kThreads / group;
  const int lane = threadIdx.x % group;
  const int64_t count = seg.outer * seg.chunks;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / group; s < count;
       s += static_cast<int64_t>(gridDim.x) * per_block) {
    const T* p = x + (s / seg.chunks) * seg.r;
    const int64_t begin = (s % seg.chunks) * seg.len, end = std::min(seg.r, begin + seg.len);
    A acc = A(0);
    for (int64_t j = begin + lane; j < end; j += group) acc = add(acc, static_cast<A>(static_cast<compute_t<T>>(p[j])));
    acc = group_sum(acc, group);
    if (lane == 0) out[s] = convert<Out>(acc);
  }
}

// Whether candidate (a, ia) beats (b, ib): NaN beats numbers, then the larger
// (smaller) value, then the lower index.
template <typename V>
__device__ inline bool better(V a, int64_t ia, V b, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<V>) {
    const bool na = math::isnan(a), nb = math::isnan(b);
    if (na || nb) return na && (!nb || ia < ib);
  }
  if (a == b) return ia < ib;
  return largest ? a > b : a < b;
}

template <typename V>
struct ValIdx {
  V v;
  int64_t i;
};

template <typename V>
__device__ inline void shfl_better(V& best, int64_t& best_i, int d, bool largest) {
  const V ov = shfl_down(best, d);
  const int64_t oi = shfl_down(best_i, d);
  if (better(ov, oi, best, best_i, largest)) {
    best = ov;
    best_i = oi;
  }
}

// The best element of segment s: its index in the row to indices[s], and its
// value, read from row s / chunks of `src` (rows of src_r elements), to values[s].
// Candidates are x's elements; their indices are their positions, or idx[] when given
// (the second pass, over the first pass's winners).
template <typename T>
__global__ void arg_segments(const T* x, const int64_t* idx, const T* src, int64_t src_r, T* values, int64_t* indices,
                             Segments seg, int group, bool largest) {
  using V = compute_t<T>;
  const int per_block = kThreads / group;
  const int lane = threadIdx.x % group;
  const int64_t count = seg.outer * seg.chunks;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / group; s < count;
       s += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = s / seg.chunks;
    const T* p = x + row * seg.r;
    const int64_t* pi = idx == nullptr ? nullptr : idx + row * seg.r;
    const int64_t begin = (s % seg.chunks) * seg.len, end = std::min(seg.r, begin + seg.len);
    // Every thread starts from a real element of the segment (never empty), so no identity is needed.
    const int64_t first = begin + lane < end ? begin + lane : begin;
    V best = static_cast<V>(p[first]);
    int64_t best_i = pi ? pi[first] : first;
    for (int64_t j = first + group; j < end; j += group) {
      const V v = static_cast<V>(p[j]);
      const int64_t i = pi ? pi[j] : j;
      if (better(v, i, best, best_i, largest)) {
        best = v;
        best_i = i;
      }
    }
    for (int d = kWarp / 2; d > 0; d /= 2) shfl_better(best, best_i, d, largest);
    if (group != kWarp) {
      __shared__ ValIdx<V> partial[kThreads / kWarp];
      const int warp = threadIdx.x / kWarp, wl = threadIdx.x % kWarp;
      __syncthreads();
      if (wl == 0) partial[warp] = {best, best_i};
      __syncthreads();
      if (warp == 0) {
        const ValIdx<V> mine = partial[wl < kThreads / kWarp ? wl : 0];
        best = mine.v;
        best_i = mine.i;
        for (int d = kWarp / 2; d > 0; d /= 2) shfl_better(best, best_i, d, largest);
      }
    }
    if (lane == 0) {
      values[s] = src[row * src_r + best_i];
      indices[s] = best_i;
    }
  }
}

// The input as contiguous rows [outer, r] (copied when the caller did not make it so).
Tensor as_rows(const Tensor& x, std::string_view op) {
  check_cuda_tensor(x, op, "input");
  check_ndim(x, 2, op, "input");
  return x.contiguous();
}

std::vector<Tensor> reduce_sum(const std::vector<Tensor>& in, const Attrs&) {
  check_inputs(in, 1, op::kReduceSum);
  const Tensor x = as_rows(in[0], op::kReduceSum);
  const int64_t outer = x.size(0), r = x.size(1);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::kI64;
  Tensor out = Tensor::empty({outer}, TensorOptions(out_dtype, x.device()));
  if (outer == 0) return {out};
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const Segments seg = plan(outer, r);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = sum_acc_t<T>;
    using Out = std::conditional_t<std::is_floating_point_v<compute_t<T>>, T, int64_t>;
    const T* px = static_cast<const T*>(x.data_ptr());
    Out* po = static_cast<Out*>(out.data_ptr());
    if (seg.chunks == 1) {
      sum_segments<T, Out><<<blocks_for(seg, group_for(r)), kThreads, 0, stream>>>(px, po, seg, group_for(r));
      return;
    }
    // Pass 1: segment sums in the accumulator type; pass 2: the rows of those.
    Tensor partial = Tensor::empty({outer, seg.chunks}, TensorOptions(dtype_of<A>(), x.device()));
    sum_segments<T, A><<<blocks_for(seg, kThreads), kThreads, 0, stream>>>(px, partial.data<A>(), seg, kThreads);
    check_launch(op::kReduceSum);
    const Segments rows = plan(outer, seg.chunks);
    sum_segments<A, Out><<<blocks_for(rows, group_for(seg.chunks)), kThreads, 0, stream>>>(partial.data<A>(), po, rows,
                                                                                           group_for(seg.chunks));
  });
  check_launch(op::kReduceSum);
  return {out};
}

std::vector<Tensor> reduce_arg(std::string_view op, bool largest, const std::vector<Tensor>& in) {
  check_inputs(in, 1, op);
  const Tensor x = as_rows(in[0], op);
  const int64_t outer = x.size(0), r = x.size(1);
  COPPICE_CHECK(r > 0 || outer == 0, op, ": cannot reduce an empty dimension (input shape ", shape_to_string(x.shape()),
                ")");
  Tensor values = Tensor::empty({outer}, x.options());
  Tensor indices = Tensor::empty({outer}, TensorOptions(DType::kI64, x.device()));
  if (outer == 0) return {values, indices};
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const Segments seg = plan(outer, r);
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.data_ptr());
    T* pv = static_cast<T*>(values.data_ptr());
    if (seg.chunks == 1) {
      arg_segments<T><<<blocks_for(seg, group_for(r)), kThreads, 0, stream>>>(
          px, nullptr, px, r, pv, indices.data<int64_t>(), seg, group_for(r), largest);
      return;
    }
    Tensor part_v = Tensor::empty({outer, seg.chunks}, x.options());
    Tensor part_i = Tensor::empty({outer, seg.chunks}, TensorOptions(DType::kI64, x.device()));
    arg_segments<T><<<blocks_for(seg, kThreads), kThreads, 0, stream>>>(
        px, nullptr, px, r, static_cast<T*>(part_v.data_ptr()), part_i.data<int64_t>(), seg, kThreads, largest);
    check_launch(op);
    const Segments rows = plan(outer, seg.chunks);
    arg_segments<T><<<blocks_for(rows, group_for(seg.chunks)), kThreads, 0, stream>>>(
        static_cast<const T*>(part_v.data_ptr()), part_i.data<int64_t>(), px, r, pv, indices.data<int64_t>(), rows,
        group_for(seg.chunks), largest);
  });
  check_launch(op);
  return {values, indices};
}

// Column sums of x [r, inner], or of each of x [batch, r, inner]'s slabs
// (floating; a sum over middle dims, such as a mean over a sequence's
// tokens, read in place where the rows path would permute it first; the
// batch's columns are numbered b * inner + c throughout): pass 1 sums each column over
// chunks of kColChunk rows or more (a thread per V consecutive columns: 16-byte loads
// where the rows allow, so every warp reads 512 contiguous bytes of a row),
// pass 2 adds the chunk sums (column_totals; with one chunk, pass 1 writes
// the totals itself); no atomics, so the result is the
// same on every run. The bias gradient of a linear layer is this sum; through
// reduce_sum it cost a transposed copy of the whole gradient first. Each
// column is summed row by row within a chunk, whatever V is.
constexpr int64_t kColChunk = 64;
constexpr int kColLoads = 8;  // rows loaded ahead by column_chunks

// The chunks that r rows make, one grid row each: kColChunk rows a chunk,
// more where that would need more grid rows than a grid has.
struct ColumnChunks {
  int64_t rows;   // rows a chunk
  int64_t count;  // chunks
};
ColumnChunks column_chunks_for(int64_t r) {
  constexpr int64_t kMaxGridRows = 65535;
  const int64_t rows = std::max(kColChunk, (r + kMaxGridRows - 1) / kMaxGridRows);
  return {rows, std::max<int64_t>(1, (r + rows - 1) / rows)};
}

// Column sums in their passes: `first(dst)` launches the first pass into
// dst. With one chunk that is `out` itself (T: the totals, the one chunk's
// sums rounded as column_totals would round them); else A partials
// [chunks, inner], which column_totals adds in chunk order.
template <typename A, typename T, typename First>
void column_sums_in_passes(int64_t chunks, int64_t inner, T* out, Device device, cudaStream_t stream, First first) {
  if (chunks == 1) {  // e.g. a GPT's position-table gradient, [32, 512 x 1024]: the second pass took 22 us (H100)
    first(out);
    return;
  }
  Tensor partial = Tensor::empty({chunks, inner}, TensorOptions(dtype_of<A>(), device));
  first(partial.data<A>());
  launch_column_totals<A, T>(partial.data<A>(), chunks, inner, out, stream);
}

// O: A for a chunk's partial sums; T when one chunk holds every row, so its
// sums are the totals, written rounded as column_totals would write them
// (its lanes add +0 to the one partial: the same value, never -0, since a
// sum that starts at +0 cannot become -0).
// A thread's V columns lie in one slab (inner is a multiple of V).
template <typename T, typename A, typename O, int V>
__global__ void column_chunks(const T* __restrict__ x, int64_t r, int64_t chunk_rows, int64_t inner, int64_t cols,
                              O* __restrict__ partial) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= cols) return;
  const int64_t slab = c0 / inner;
  const T* __restrict__ column = x + slab * r * inner + (c0 - slab * inner);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < r ? begin + chunk_rows : r;
  A s[V];
  for (int v = 0; v < V; ++v) s[v] = 0;
  auto load = [&](int64_t i, T(&xv)[V]) {
    if constexpr (V > 1) {
      *reinterpret_cast<uint4*>(xv) = *reinterpret_cast<const uint4*>(column + i * inner);
    } else {
      xv[0] = column[i * inner];
    }
  };
  // kColLoads rows' loads issued before their sums (still added row by row):
  // a thread with one load in flight left HBM idle, latency-bound.
  int64_t i = begin;
  for (; i + kColLoads <= end; i += kColLoads) {
    T xv[kColLoads][V];
#pragma unroll
    for (int j = 0; j < kColLoads; ++j) load(i + j, xv[j]);
#pragma unroll
    for (int j = 0; j < kColLoads; ++j)
      for (int v = 0; v < V; ++v) s[v] += static_cast<A>(xv[j][v]);
  }
  for (; i < end; ++i) {
    T xv[V];
    load(i, xv);
    for (int v = 0; v < V; ++v) s[v] += static_cast<A>(xv[v]);
  }
  for (int v = 0; v < V; ++v) partial[static_cast<int64_t>(blockIdx.y) * cols + c0 + v] = convert<O>(s[v]);
}

// Whether V-wide (16-byte) accesses fit: columns a multiple of V, every pointer aligned.
template <int V>
bool vector_fits(int64_t inner, std::initializer_list<const void*> pointers) {
  if (inner % V != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

std::vector<Tensor> reduce_sum_cols(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kReduceSumCols;
  check_inputs(in, 1, op);
  check_cuda_tensor(in[0], op, "input");
  COPPICE_CHECK(in[0].dim() == 2 || in[0].dim() == 3, op, ": needs [r, inner] or [batch, r, inner], got ",
                shape_to_string(in[0].shape()));
  COPPICE_CHECK(is_floating(in[0].dtype()), op, ": floating input expected, got ", dtype_name(in[0].dtype()));
  const Tensor x = in[0].contiguous();
  const bool batched = x.dim() == 3;
  const int64_t batch = batched ? x.size(0) : 1, r = x.size(batched ? 1 : 0), inner = x.size(batched ? 2 : 1);
  Tensor out = batched ? Tensor::empty({batch, inner}, x.options()) : Tensor::empty({inner}, x.options());
  const int64_t cols = batch * inner;
  if (cols == 0) return {out};
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const ColumnChunks chunks = column_chunks_for(r);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = sum_acc_t<T>;
    constexpr int V = 16 / sizeof(T);
    const T* px = static_cast<const T*>(x.data_ptr());
    column_sums_in_passes<A>(chunks.count, cols, static_cast<T*>(out.data_ptr()), x.device(), stream, [&](auto* dst) {
      using O = std::remove_pointer_t<decltype(dst)>;
      if (vector_fits<V>(inner, {px})) {
        const unsigned col_blocks = static_cast<unsigned>((cols / V + kThreads - 1) / kThreads);
        column_chunks<T, A, O, V><<<dim3(col_blocks, static_cast<unsigned>(chunks.count)), kThreads, 0, stream>>>(
            px, r, chunks.rows, inner, cols, dst);
      } else {
        const unsigned col_blocks = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
        column_chunks<T, A, O, 1><<<dim3(col_blocks, static_cast<unsigned>(chunks.count)), kThreads, 0, stream>>>(
            px, r, chunks.rows, inner, cols, dst);
      }
      check_launch(op);
    });
  });
  check_launch(op);
  return {out};
}

// relu_backward and the column sums of its result in one pass (linear_relu's
// input and bias gradients): a thread per V consecutive columns (16-byte
// loads and stores where the rows allow) over a chunk of kColChunk rows, then
// column_totals adds the chunks, as reduce_sum_cols does (and as there, with
// one chunk the sums are written as totals, O = T, and no second pass runs).
// Unfused, the two were a third of a BSR MLP layer's backward outside its
// products.
template <typename T, typename A, typename O, int V>
__global__ void relu_backward_column_chunks(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ out,
                                            int64_t r, int64_t chunk_rows, int64_t inner, O* __restrict__ partial) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= inner) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < r ? begin + chunk_rows : r;
  A s[V];
  for (int v = 0; v < V; ++v) s[v] = 0;
  for (int64_t i = begin; i < end; ++i) {
    T gv[V], yv[V], ov[V];
    const int64_t at = i * inner + c0;
    if constexpr (V > 1) {
      *reinterpret_cast<uint4*>(gv) = *reinterpret_cast<const uint4*>(g + at);
      *reinterpret_cast<uint4*>(yv) = *reinterpret_cast<const uint4*>(y + at);
    } else {
      gv[0] = g[at];
      yv[0] = y[at];
    }
    for (int v = 0; v < V; ++v) {
      ov[v] = static_cast<compute_t<T>>(yv[v]) > compute_t<T>(0) ? gv[v] : T(0);
      s[v] += static_cast<A>(ov[v]);
    }
    if constexpr (V > 1) {
      *reinterpret_cast<uint4*>(out + at) = *reinterpret_cast<const uint4*>(ov);
    } else {
      out[at] = ov[0];
    }
  }
  for (int v = 0; v < V; ++v) partial[static_cast<int64_t>(blockIdx.y) * inner + c0 + v] = convert<O>(s[v]);
}

std::vector<Tensor> relu_backward_col_sums(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kReluBackwardColSums;
  check_inputs(in, 2, op);
  const Tensor& g = in[0];
  const Tensor& y = in[1];
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.dim() == 2 && t.is_contiguous() && t.device() == g.device() && t.dtype() == g.dtype() &&
                      t.shape() == g.shape() && is_floating(t.dtype()),
                  op, ": needs two contiguous floating [r, c] tensors of one shape, dtype and device");
  }
  const int64_t r = g.size(0), inner = g.size(1);
  Tensor out = Tensor::empty(g.shape(), g.options());
  Tensor sums = Tensor::empty({inner}, g.options());
  if (inner == 0) return {out, sums};
  const int device = g.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const ColumnChunks chunks = column_chunks_for(r);
  dispatch_floating(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = sum_acc_t<T>;
    constexpr int V = 16 / sizeof(T);
    const T* pg = static_cast<const T*>(g.data_ptr());
    const T* py = static_cast<const T*>(y.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    column_sums_in_passes<A>(chunks.count, inner, static_cast<T*>(sums.data_ptr()), g.device(), stream, [&](auto* dst) {
      using O = std::remove_pointer_t<decltype(dst)>;
      if (vector_fits<V>(inner, {pg, py, po})) {
        const unsigned col_blocks = static_cast<unsigned>((inner / V + kThreads - 1) / kThreads);
        relu_backward_column_chunks<T, A, O, V>
            <<<dim3(col_blocks, static_cast<unsigned>(chunks.count)), kThreads, 0, stream>>>(pg, py, po, r, chunks.rows,
                                                                                             inner, dst);
      } else {
        const unsigned col_blocks = static_cast<unsigned>((inner + kThreads - 1) / kThreads);
        relu_backward_column_chunks<T, A, O, 1>
            <<<dim3(col_blocks, static_cast<unsigned>(chunks.count)), kThreads, 0, stream>>>(pg, py, po, r, chunks.rows,
                                                                                             inner, dst);
      }
      check_launch(op);
    });
  });
  check_launch(op);
  return {out, sums};
}

const KernelRegistrar kSum(op::kReduceSum, DeviceType::kCuda, {"dense"}, reduce_sum);
const KernelRegistrar kReluBackwardColSums(op::kReluBackwardColSums, DeviceType::kCuda, {"dense", "dense"},
                                           relu_backward_col_sums);
const KernelRegistrar kSumCols(op::kReduceSumCols, DeviceType::kCuda, {"dense"}, reduce_sum_cols);
const KernelRegistrar kMax(op::kReduceMax, DeviceType::kCuda, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs&) {
                             return reduce_arg(op::kReduceMax, true, in);
                           });
const KernelRegistrar kMin(op::kReduceMin, DeviceType::kCuda, {"dense"},
                           [](const std::vector<Tensor>& in, const Attrs&) {
                             return reduce_arg(op::kReduceMin, false, in);
                           });

}  // namespace
}  // namespace coppice::cuda
