// Fused LayerNorm on CUDA: "layer_norm" and "layer_norm_backward"
// (tensor/kernels.h, tensor/ops.h), twins of the composites in
// tensor/ops_nn.cc, which run about a dozen elementwise and reduction
// launches each way: on the GPT job's [16384, 1024] bf16 rows the composite
// backward took 1.3 ms, the fused one a few passes over the rows. And the
// pre-norm block's residual step fused into it: "add_layer_norm" (x, r ->
// h = x + r, y = layer_norm(h)) and "add_layer_norm_backward" (dx = dh +
// layer_norm's dx), which save a pass each way and the add's launch.
//
// Forward: one warp per row computes the mean, then the variance of the
// centered row (two passes, as the composite does), then writes y. With a
// residual, the row's values are h = x + r rounded to the dtype, exactly what
// add writes, so y is layer_norm of the h that is returned. Backward: one
// warp per row forms dx from the recomputed statistics (plus dh, before the
// one rounding) and keeps each row's mean and rstd; then, when dweight or
// dbias is wanted, a thread per column sums g * xhat and g over a chunk of
// rows, and a second kernel adds the chunks in order: no atomics, the same
// bits on every run. Rows compute in compute_t (f32 for bf16/f16).
//
// Rows whose length is a multiple of a 16-byte pack, with every array
// 16-byte aligned, take the streamed kernels up to 32 x 4 packs (1024 values
// of a 16-bit type): each warp's next rows land in shared memory by cp.async
// while it works on one, and the dx kernel sums dweight and dbias itself, a
// row of partial sums a thread block, added in order by the same second
// kernel (tensor/cuda/layer_norm_streamed.cuh). Longer such rows
// take the packed kernels: each lane moves 16 bytes per access and keeps its
// first 32 values of each operand in registers, so a row of up to 1024
// elements is read from memory once (wider rows read the rest again, from
// L1/L2). Other rows take the scalar kernels. All of them differ only in
// the order of their sums (and the streamed ones round in hardware, the same
// bits for finite values, divide by d as a multiply by 1/d, and fuse the
// weight and bias into one FMA).
#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/column_totals.cuh"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/cuda/grid_dependency.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/layer_norm_streamed.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/warp.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

// Two rows (one warp each) a thread block, and for bf16 rows a register cap
// that lets an SM hold 16 (forward) or 12 (backward) of them: a row's loads are
// one dependent chain (load, sum, variance, write), so what hides HBM's latency
// is rows in flight. Measured on the GPT's [16384, 1024] bf16 rows (H200,
// Nsight Compute): forward 48.8 -> 44.3 us, dx 57.5 -> 50.3 us against 8 rows
// a block uncapped (72-110 registers, 22-33 % of the warps an SM can hold).
// The capped bf16 kernels spill a little (ptxas, sm_90: 40 and 176 bytes a
// thread loaded) and are still faster; f16 spills twice as much at the same
// caps and was not measured, so it and the wider types keep their registers.
constexpr int kRowsPerBlock = 2;
constexpr int kRowThreads = kRowsPerBlock * 32;
template <typename T>
constexpr int kForwardBlocksPerSm = std::is_same_v<T, BFloat16> ? 16 : 1;  // 64 registers a thread
template <typename T>
constexpr int kDxBlocksPerSm = std::is_same_v<T, BFloat16> ? 12 : 1;  // 80 registers a thread
// Rows per partial column sum (more where the grid would pass 65535 chunks):
// [16384, 1024] rows make 512 chunks, enough blocks to keep HBM busy.
constexpr int64_t kChunkRows = 32;
constexpr int kParamLoads = 4;  // rows loaded ahead by layer_norm_param_chunks

// Packs per lane held in registers across a row's passes: 32 values (8 in
// f64, whose backward would otherwise need all 255 registers a thread has).
template <typename T>
constexpr int kCachedPacks = (sizeof(T) == 8 ? 8 : 32) / Pack16<T>::kN;

// h = x + r as add computes it: in C, rounded to T.
template <typename T, typename C = compute_t<T>>
__device__ inline T add_round(T x, T r) {
  return convert<T>(convert<C>(x) + convert<C>(r));
}

template <typename T, typename C = compute_t<T>>
__device__ void row_stats(const T* x, int64_t d, double eps, C& mean, C& rstd) {
  const int lane = threadIdx.x % 32;
  C s = 0;
  for (int64_t c = lane; c < d; c += 32) s += convert<C>(x[c]);
  mean = warp_sum(s) / C(d);
  C v = 0;
  for (int64_t c = lane; c < d; c += 32) {
    const C e = convert<C>(x[c]) - mean;
    v += e * e;
  }
  rstd = C(1) / math::sqrt(warp_sum(v) / C(d) + C(eps));
}

// ---- forward ------------------------------------------------------------------------

// y = layer_norm(x), or, with r, h = x + r and y = layer_norm(h). Any d.
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_kernel(const T* x, const T* r, const T* w, const T* b, T* h, T* y, int64_t rows, int64_t d,
                                  double eps) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const T* src = x + row * d;
    if (r != nullptr) {
      T* hr = h + row * d;
      for (int64_t c = lane; c < d; c += 32) hr[c] = add_round(src[c], r[row * d + c]);
      src = hr;  // each lane reads back only the elements it wrote
    }
    C mean, rstd;
    row_stats(src, d, eps, mean, rstd);
    for (int64_t c = lane; c < d; c += 32) {
      C v = (convert<C>(src[c]) - mean) * rstd;
      if (w != nullptr) v *= convert<C>(w[c]);
      if (b != nullptr) v += convert<C>(b[c]);
      y[row * d + c] = convert<T>(v);
    }
  }
}

// Pack p of a row's values in C: h = x + r (stored to h) with r, else x.
template <typename T, typename C>
__device__ inline void load_row_pack(const T* xr, const T* rr, T* hr, int64_t p, C (&v)[Pack16<T>::kN]) {
  constexpr int kN = Pack16<T>::kN;
  const Pack16<T> xp = load16(xr + p * kN);
  if (rr == nullptr) {
#pragma unroll
    for (int e = 0; e < kN; ++e) v[e] = convert<C>(xp.v[e]);
    return;
  }
  const Pack16<T> rp = load16(rr + p * kN);
  Pack16<T> hp;
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    hp.v[e] = add_round(xp.v[e], rp.v[e]);
    v[e] = convert<C>(hp.v[e]);
  }
  store16(hr + p * kN, hp);
}

// The packed layer_norm_kernel: d a multiple of kN, every array 16-byte aligned.
template <typename T, typename C = compute_t<T>>
__global__ void __launch_bounds__(kRowThreads, kForwardBlocksPerSm<T>)
    layer_norm_packed_kernel(const T* x, const T* r, const T* w, const T* b, T* h, T* y, int64_t rows, int64_t d,
                             double eps) {
  constexpr int kN = Pack16<T>::kN, kCached = kCachedPacks<T>;
  const int lane = threadIdx.x % 32;
  const int64_t packs = d / kN;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const int64_t base = row * d;
    const T* xr = x + base;
    const T* rr = r != nullptr ? r + base : nullptr;
    T* hr = r != nullptr ? h + base : nullptr;
    // Packs past the cache are read again from here: h once written, else x.
    const T* src = r != nullptr ? hr : xr;
    C cache[kCached][kN];
    // Calls f(p, values) for each of this lane's packs, cached ones from registers.
    auto each_pack = [&](auto&& f) {
#pragma unroll
      for (int k = 0; k < kCached; ++k) {
        const int64_t p = lane + k * 32;
        if (p < packs) f(p, cache[k]);
      }
      for (int64_t p = lane + kCached * 32; p < packs; p += 32) {
        const Pack16<T> sp = load16(src + p * kN);
        C v[kN];
#pragma unroll
        for (int e = 0; e < kN; ++e) v[e] = convert<C>(sp.v[e]);
        f(p, v);
      }
    };
    C s = 0;
#pragma unroll
    for (int k = 0; k < kCached; ++k) {
      const int64_t p = lane + k * 32;
      if (p < packs) {
        load_row_pack(xr, rr, hr, p, cache[k]);
#pragma unroll
        for (int e = 0; e < kN; ++e) s += cache[k][e];
      }
    }
    for (int64_t p = lane + kCached * 32; p < packs; p += 32) {
      C v[kN];
      load_row_pack(xr, rr, hr, p, v);  // writes h, which later passes read back
#pragma unroll
      for (int e = 0; e < kN; ++e) s += v[e];
    }
    const C mean = warp_sum(s) / C(d);
    C q = 0;
    each_pack([&](int64_t, const C(&v)[kN]) {
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        const C c = v[e] - mean;
        q += c * c;
      }
    });
    const C rstd = C(1) / math::sqrt(warp_sum(q) / C(d) + C(eps));
    each_pack([&](int64_t p, const C(&v)[kN]) {
      Pack16<T> wp, bp, out;
      if (w != nullptr) wp = load16(w + p * kN);
      if (b != nullptr) bp = load16(b + p * kN);
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        C t = (v[e] - mean) * rstd;
        if (w != nullptr) t *= convert<C>(wp.v[e]);
        if (b != nullptr) t += convert<C>(bp.v[e]);
        out.v[e] = convert<T>(t);
      }
      store16(y + base + p * kN, out);
    });
  }
}

// ---- the streamed kernels' launch (layer_norm_streamed.cuh) ---------------------------

// The grid of a streamed kernel with `smem` bytes a block: as many blocks as
// fit on the device at once (each warp then walks rows / warps of them),
// fewer for few rows.
template <typename Kernel>
unsigned stream_blocks(Kernel kernel, size_t smem, int64_t rows, int device, std::string_view op) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), op,
             "cudaFuncSetAttribute");
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, streamed_rows::kThreads, smem), op,
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * sm_count(device, op);
  return static_cast<unsigned>(std::min(resident, (rows + streamed_rows::kWarps - 1) / streamed_rows::kWarps));
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks));
}

// Whether a row of d elements can go in packs: d a multiple of the pack and
// every array (null ones aside) 16-byte aligned.
template <typename T>
bool packable(int64_t d, std::initializer_list<const void*> arrays) {
  if (d % Pack16<T>::kN != 0) return false;
  for (const void* p : arrays) {
    if (!aligned16(p)) return false;
  }
  return true;
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The forward of both ops: y, and h when r is defined; x and r contiguous.
std::vector<Tensor> forward(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, int64_t d,
                            double eps, std::string_view op) {
  Tensor y = Tensor::empty(x.shape(), x.options());
  Tensor h = r.defined() ? Tensor::empty(x.shape(), x.options()) : Tensor();
  const int64_t rows = d > 0 ? x.numel() / d : 0;
  if (rows == 0) return r.defined() ? std::vector<Tensor>{h, y} : std::vector<Tensor>{y};
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor(), b = bias.defined() ? bias.contiguous() : Tensor();
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *xp = x.data<T>(), *rp = data_or_null<T>(r), *wp = data_or_null<T>(w), *bp = data_or_null<T>(b);
    T *hp = h.defined() ? h.data<T>() : nullptr, *yp = y.data<T>();
    if (packable<T>(d, {xp, rp, wp, bp, hp, yp}) && d <= streamed_rows::kMaxD<T>) {
      const size_t smem = streamed_rows::smem_bytes<T>(rp != nullptr ? 2 : 1, d);
      const auto kernel =
          rp != nullptr ? streamed_rows::forward_kernel<T, true> : streamed_rows::forward_kernel<T, false>;
      // The streamed kernels wait before touching global memory: they may overlap the kernel before them.
      launch_overlapping_on_sm90(
          x.device().index, kernel, dim3(stream_blocks(kernel, smem, rows, x.device().index, op)),
          dim3(streamed_rows::kThreads), smem, stream, op, xp, rp, wp, bp, hp, yp, rows, static_cast<int>(d), eps);
    } else if (packable<T>(d, {xp, rp, wp, bp, hp, yp})) {
      layer_norm_packed_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(xp, rp, wp, bp, hp, yp, rows, d, eps);
    } else {
      layer_norm_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(xp, rp, wp, bp, hp, yp, rows, d, eps);
    }
  });
  check_launch(op);
  return r.defined() ? std::vector<Tensor>{h, y} : std::vector<Tensor>{y};
}

// inputs: x, weight (or none), bias (or none); attrs normalized_shape, eps.
std::vector<Tensor> layer_norm(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kLayerNorm;
  check_inputs(in, 3, op);
  const Tensor x = in[0].contiguous();
  check_cuda_tensor(x, op, "input");
  return forward(x, Tensor(), in[1], in[2], shape_numel(attrs.get_ints("normalized_shape")), attrs.get_double("eps"),
                 op);
}

// inputs: x, r (x's shape and dtype), weight (or none), bias (or none);
// attrs normalized_shape, eps. Outputs h = x + r and y = layer_norm(h).
std::vector<Tensor> add_layer_norm(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kAddLayerNorm;
  check_inputs(in, 4, op);
  const Tensor x = in[0].contiguous(), r = in[1].contiguous();
  check_cuda_tensor(x, op, "input");
  check_cuda_tensor(r, op, "residual");
  COPPICE_CHECK(r.shape() == x.shape() && r.dtype() == x.dtype(), op, ": the residual must have the input's shape ",
                shape_to_string(x.shape()), " and dtype ", dtype_name(x.dtype()));
  return forward(x, r, in[2], in[3], shape_numel(attrs.get_ints("normalized_shape")), attrs.get_double("eps"), op);
}

// ---- backward -----------------------------------------------------------------------

// dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)) (+ dh), gxhat = g * w.
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_dx_kernel(const T* x, const T* w, const T* g, const T* dh, T* dx, C* means, C* rstds,
                                     int64_t rows, int64_t d, double eps) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; r < rows; r += warps) {
    const T *xr = x + r * d, *gr = g + r * d;
    C mean, rstd;
    row_stats(xr, d, eps, mean, rstd);
    C a = 0, bsum = 0;
    for (int64_t c = threadIdx.x % 32; c < d; c += 32) {
      const C xhat = (convert<C>(xr[c]) - mean) * rstd;
      const C gx = convert<C>(gr[c]) * (w != nullptr ? convert<C>(w[c]) : C(1));
      a += gx;
      bsum += gx * xhat;
    }
    a = warp_sum(a) / C(d);
    bsum = warp_sum(bsum) / C(d);
    for (int64_t c = threadIdx.x % 32; c < d; c += 32) {
      const C xhat = (convert<C>(xr[c]) - mean) * rstd;
      const C gx = convert<C>(gr[c]) * (w != nullptr ? convert<C>(w[c]) : C(1));
      C v = rstd * (gx - a - xhat * bsum);
      if (dh != nullptr) v += convert<C>(dh[r * d + c]);
      dx[r * d + c] = convert<T>(v);
    }
    if (threadIdx.x % 32 == 0) {
      means[r] = mean;
      rstds[r] = rstd;
    }
  }
}

// Pack p of a row's x and g * w in C.
template <typename T, typename C>
__device__ inline void load_x_gx(const T* xr, const T* gr, const T* w, int64_t p, C (&xv)[Pack16<T>::kN],
                                 C (&gv)[Pack16<T>::kN]) {
  constexpr int kN = Pack16<T>::kN;
  const Pack16<T> xp = load16(xr + p * kN), gp = load16(gr + p * kN);
  Pack16<T> wp;
  if (w != nullptr) wp = load16(w + p * kN);
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    xv[e] = convert<C>(xp.v[e]);
    gv[e] = convert<C>(gp.v[e]) * (w != nullptr ? convert<C>(wp.v[e]) : C(1));
  }
}

// The packed layer_norm_dx_kernel: d a multiple of kN, every array 16-byte aligned.
template <typename T, typename C = compute_t<T>>
__global__ void __launch_bounds__(kRowThreads, kDxBlocksPerSm<T>)
    layer_norm_dx_packed_kernel(const T* x, const T* w, const T* g, const T* dh, T* dx, C* means, C* rstds,
                                int64_t rows, int64_t d, double eps) {
  constexpr int kN = Pack16<T>::kN, kCached = kCachedPacks<T>;
  const int lane = threadIdx.x % 32;
  const int64_t packs = d / kN;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const int64_t base = row * d;
    const T *xr = x + base, *gr = g + base;
    C xc[kCached][kN], gc[kCached][kN];
#pragma unroll
    for (int k = 0; k < kCached; ++k) {
      const int64_t p = lane + k * 32;
      if (p < packs) load_x_gx(xr, gr, w, p, xc[k], gc[k]);
    }
    // Calls f(p, x values, g * w values) for each of this lane's packs.
    auto each_pack = [&](auto&& f) {
#pragma unroll
      for (int k = 0; k < kCached; ++k) {
        const int64_t p = lane + k * 32;
        if (p < packs) f(p, xc[k], gc[k]);
      }
      for (int64_t p = lane + kCached * 32; p < packs; p += 32) {
        C xv[kN], gv[kN];
        load_x_gx(xr, gr, w, p, xv, gv);
        f(p, xv, gv);
      }
    };
    C s = 0;
    each_pack([&](int64_t, const C(&xv)[kN], const C(&)[kN]) {
#pragma unroll
      for (int e = 0; e < kN; ++e) s += xv[e];
    });
    const C mean = warp_sum(s) / C(d);
    C q = 0;
    each_pack([&](int64_t, const C(&xv)[kN], const C(&)[kN]) {
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        const C c = xv[e] - mean;
        q += c * c;
      }
    });
    const C rstd = C(1) / math::sqrt(warp_sum(q) / C(d) + C(eps));
    C a = 0, bsum = 0;
    each_pack([&](int64_t, const C(&xv)[kN], const C(&gv)[kN]) {
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        a += gv[e];
        bsum += gv[e] * ((xv[e] - mean) * rstd);
      }
    });
    a = warp_sum(a) / C(d);
    bsum = warp_sum(bsum) / C(d);
    each_pack([&](int64_t p, const C(&xv)[kN], const C(&gv)[kN]) {
      Pack16<T> hp, out;
      if (dh != nullptr) hp = load16(dh + base + p * kN);
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        const C xhat = (xv[e] - mean) * rstd;
        C v = rstd * (gv[e] - a - xhat * bsum);
        if (dh != nullptr) v += convert<C>(hp.v[e]);
        out.v[e] = convert<T>(v);
      }
      store16(dx + base + p * kN, out);
    });
    if (lane == 0) {
      means[row] = mean;
      rstds[row] = rstd;
    }
  }
}

// Per chunk of chunk_rows rows and per column: sum of g * xhat and of g. A
// thread takes V consecutive columns (a 16-byte pack where the rows allow:
// every warp then reads 512 contiguous bytes of a row; 1 otherwise); each
// column is summed row by row either way, so both paths give the same bits.
template <typename T, int V, typename C = compute_t<T>>
__global__ void layer_norm_param_chunks(const T* x, const T* g, const C* means, const C* rstds, int64_t rows, int64_t d,
                                        int64_t chunk_rows, C* dw_partial, C* db_partial) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= d) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  C sw[V], sb[V];
#pragma unroll
  for (int e = 0; e < V; ++e) sw[e] = sb[e] = 0;
  auto load = [&](int64_t r, T(&gv)[V], T(&xv)[V]) {
    if constexpr (V > 1) {
      const Pack16<T> gp = load16(g + r * d + c0), xp = load16(x + r * d + c0);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        gv[e] = gp.v[e];
        xv[e] = xp.v[e];
      }
    } else {
      gv[0] = g[r * d + c0];
      xv[0] = x[r * d + c0];
    }
  };
  auto add = [&](int64_t r, const T(&gv)[V], const T(&xv)[V]) {
    const C mean = means[r], rstd = rstds[r];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const C gc = convert<C>(gv[e]);
      sw[e] += gc * (convert<C>(xv[e]) - mean) * rstd;
      sb[e] += gc;
    }
  };
  // kParamLoads rows' loads issued before their sums (still added row by
  // row), so that a thread keeps several loads in flight.
  int64_t r = r0;
  for (; r + kParamLoads <= r1; r += kParamLoads) {
    T gv[kParamLoads][V], xv[kParamLoads][V];
#pragma unroll
    for (int j = 0; j < kParamLoads; ++j) load(r + j, gv[j], xv[j]);
#pragma unroll
    for (int j = 0; j < kParamLoads; ++j) add(r + j, gv[j], xv[j]);
  }
  for (; r < r1; ++r) {
    T gv[V], xv[V];
    load(r, gv, xv);
    add(r, gv, xv);
  }
  const int64_t at = static_cast<int64_t>(blockIdx.y) * d + c0;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (dw_partial != nullptr) dw_partial[at + e] = sw[e];
    if (db_partial != nullptr) db_partial[at + e] = sb[e];
  }
}

// The backward of both ops: {dx (+ dh when defined), dweight, dbias}; x, g
// and dh contiguous.
std::vector<Tensor> backward(const Tensor& x, const Tensor& weight, const Tensor& g, const Tensor& dh,
                             const Attrs& attrs, std::string_view op) {
  check_contiguous_cuda(x, op, "input");
  check_contiguous_cuda(g, op, "grad");
  if (dh.defined()) {
    check_contiguous_cuda(dh, op, "dh");
    COPPICE_CHECK(dh.shape() == x.shape() && dh.dtype() == x.dtype(), op, ": dh must have the input's shape ",
                  shape_to_string(x.shape()), " and dtype ", dtype_name(x.dtype()));
  }
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const int64_t d = attrs.get_int("d");
  const double eps = attrs.get_double("eps");
  const bool want_dw = attrs.get_bool("dweight"), want_db = attrs.get_bool("dbias");
  const int64_t rows = x.numel() / d;
  Tensor dx = Tensor::empty(x.shape(), x.options());
  Tensor dw = want_dw ? Tensor::empty({d}, x.options()) : Tensor();
  Tensor db = want_db ? Tensor::empty({d}, x.options()) : Tensor();
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const TensorOptions copts(dtype_of<C>(), x.device());
    if (rows == 0) {
      if (want_dw) dw.fill_(0.0);
      if (want_db) db.fill_(0.0);
      return;
    }
    const T *xp = x.data<T>(), *wp = data_or_null<T>(w), *gp = g.data<T>(), *hp = data_or_null<T>(dh);
    T* dxp = dx.data<T>();
    const bool packs = packable<T>(d, {xp, wp, gp, hp, dxp});
    if (packs && d <= streamed_rows::kMaxD<T>) {
      // With the parameter sums: a row of partial sums a thread block.
      const size_t smem = streamed_rows::smem_bytes<T>(hp != nullptr ? 3 : 2, d);
      const bool sums = want_dw || want_db;
      const auto kernel = sums ? streamed_rows::dx_kernel<T, true> : streamed_rows::dx_kernel<T, false>;
      const unsigned blocks = stream_blocks(kernel, smem, rows, x.device().index, op);
      Tensor pw = want_dw ? Tensor::empty({blocks, d}, copts) : Tensor();
      Tensor pb = want_db ? Tensor::empty({blocks, d}, copts) : Tensor();
      C* pwp = want_dw ? pw.data<C>() : nullptr;
      C* pbp = want_db ? pb.data<C>() : nullptr;
      launch_overlapping_on_sm90(x.device().index, kernel, dim3(blocks), dim3(streamed_rows::kThreads), smem, stream,
                                 op, xp, wp, gp, hp, dxp, pwp, pbp, rows, static_cast<int>(d), eps);
      if (want_dw) launch_column_totals<C, T>(pwp, blocks, d, dw.data<T>(), stream);
      if (want_db) launch_column_totals<C, T>(pbp, blocks, d, db.data<T>(), stream);
      return;
    }
    Tensor means = Tensor::empty({rows}, copts), rstds = Tensor::empty({rows}, copts);
    if (packs) {
      layer_norm_dx_packed_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(xp, wp, gp, hp, dxp, means.data<C>(),
                                                                                   rstds.data<C>(), rows, d, eps);
    } else {
      layer_norm_dx_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream>>>(xp, wp, gp, hp, dxp, means.data<C>(),
                                                                            rstds.data<C>(), rows, d, eps);
    }
    check_launch(op);
    if (!want_dw && !want_db) return;
    constexpr int64_t kMaxChunks = 65535;  // the grid's y limit
    const int64_t chunk_rows = std::max(kChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    Tensor pw = want_dw ? Tensor::empty({chunks, d}, copts) : Tensor();
    Tensor pb = want_db ? Tensor::empty({chunks, d}, copts) : Tensor();
    C* pwp = want_dw ? pw.data<C>() : nullptr;
    C* pbp = want_db ? pb.data<C>() : nullptr;
    constexpr int kN = Pack16<T>::kN;
    if (packable<T>(d, {xp, gp})) {
      const unsigned col_blocks = static_cast<unsigned>((d / kN + kThreads - 1) / kThreads);
      layer_norm_param_chunks<T, kN><<<dim3(col_blocks, static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
          xp, gp, means.data<C>(), rstds.data<C>(), rows, d, chunk_rows, pwp, pbp);
    } else {
      const unsigned col_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
      layer_norm_param_chunks<T, 1><<<dim3(col_blocks, static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
          xp, gp, means.data<C>(), rstds.data<C>(), rows, d, chunk_rows, pwp, pbp);
    }
    check_launch(op);
    if (want_dw) launch_column_totals<C, T>(pwp, chunks, d, dw.data<T>(), stream);
    if (want_db) launch_column_totals<C, T>(pbp, chunks, d, db.data<T>(), stream);
  });
  check_launch(op);
  return {dx, dw, db};
}

// inputs: x, weight (or none), grad; attrs d, eps, dweight, dbias.
std::vector<Tensor> layer_norm_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kLayerNormBackward;
  check_inputs(in, 3, op);
  return backward(in[0], in[1], in[2], Tensor(), attrs, op);
}

// inputs: h, weight (or none), dy, dh (or none); attrs as layer_norm_backward.
std::vector<Tensor> add_layer_norm_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kAddLayerNormBackward;
  check_inputs(in, 4, op);
  return backward(in[0], in[1], in[2], in[3], attrs, op);
}

const KernelRegistrar kLayerNorm(op::kLayerNorm, DeviceType::kCuda, {"*", "*", "*"}, layer_norm);
const KernelRegistrar kAddLayerNorm(op::kAddLayerNorm, DeviceType::kCuda, {"*", "*", "*", "*"}, add_layer_norm);
const KernelRegistrar kLayerNormBackward(op::kLayerNormBackward, DeviceType::kCuda, {"*", "*", "*"},
                                         layer_norm_backward);
const KernelRegistrar kAddLayerNormBackward(op::kAddLayerNormBackward, DeviceType::kCuda, {"*", "*", "*", "*"},
                                            add_layer_norm_backward);

}  // namespace
}  // namespace coppice::cuda
