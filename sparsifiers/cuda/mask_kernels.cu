// CUDA twins of the selection kernels (sparsifiers/mask_ops.h has the table;
// sparsifiers/mask_kernels_cpu.cc is the CPU side). Both follow the element
// rules of sparsifiers/mask_keys.h, so they give the same masks bit for bit.
//
// sparsify_stream: one thread per four consecutive elements (one Philox
// block, drawn once), loaded and stored as one vector where aligned. sparsify_topk_mask: a stable device-wide radix
// sort of the complemented order keys carrying each element's index (tensor/cuda's sort.h), so equal keys stay in index
// order; the first k indices are kept. sparsify_block_scores: one thread per block, adding row-major in f64 with
// unfused operations, as the CPU does. sparsify_nm_mask: one thread per group.
#include <climits>
#include <cstdint>

#include "sparsifiers/mask_keys.h"
#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/sort.h"
#include "tensor/op_table.h"
#include "tensor/philox.h"

namespace coppice::cuda {
namespace {

using namespace sparsify_detail;  // NOLINT: the shared element rules

// Four consecutive elements, loaded and stored as one vector when aligned.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

template <typename T, bool kRandom, bool kValues>
__global__ void stream_kernel(const T* __restrict__ x, void* __restrict__ out, int64_t n, double threshold, float p,
                              uint64_t seed, uint64_t offset, compute_t<T> scale, bool vectorized) {
  using C = compute_t<T>;
  const int64_t quads = (n + 3) / 4;
  COPPICE_KERNEL_LOOP(q, quads) {
    uint32_t words[4] = {0, 0, 0, 0};
    if constexpr (kRandom) {
      const philox::U32x4 b = philox::block(seed, offset, static_cast<uint64_t>(q));
      words[0] = b.x;
      words[1] = b.y;
      words[2] = b.z;
      words[3] = b.w;
    }
    auto keeps = [&](C v, int j) -> bool {
      if constexpr (kRandom) {
        return philox::uniform_f32(words[j]) >= p;
      } else {
        return threshold_keeps(static_cast<double>(v), threshold);
      }
    };
    const int64_t begin = q * 4;
    if (vectorized && begin + 4 <= n) {
      const Quad<T> xv = *reinterpret_cast<const Quad<T>*>(x + begin);
      if constexpr (kValues) {
        Quad<T> yv;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const C v = static_cast<C>(xv.v[j]);
          const C y = v * scale;
          yv.v[j] = T(keeps(v, j) ? y : C(0));
        }
        *reinterpret_cast<Quad<T>*>(static_cast<T*>(out) + begin) = yv;
      } else {
        Quad<bool> mv;
#pragma unroll
        for (int j = 0; j < 4; ++j) mv.v[j] = keeps(static_cast<C>(xv.v[j]), j);
        *reinterpret_cast<Quad<bool>*>(static_cast<bool*>(out) + begin) = mv;
      }
    } else {
      const int64_t end = begin + 4 < n ? begin + 4 : n;
      for (int64_t i = begin; i < end; ++i) {
        const C v = static_cast<C>(x[i]);
        const bool keep = keeps(v, static_cast<int>(i - begin));
        if constexpr (kValues) {
          const C y = v * scale;
          static_cast<T*>(out)[i] = T(keep ? y : C(0));
        } else {
          static_cast<bool*>(out)[i] = keep;
        }
      }
    }
  }
}

std::vector<Tensor> sparsify_stream(const std::vector<Tensor>& in, const Attrs& a) {
  constexpr const char* op = op::kSparsifyStream;
  check_inputs(in, 1, op);
  check_contiguous_cuda(in[0], op, "input");
  const Tensor& x = in[0];
  const bool random = a.get_string("mode") == "random";
  const bool values = a.get_bool("values");
  const double threshold = a.get_double("threshold");
  const float p = static_cast<float>(a.get_double("p"));
  const uint64_t seed = static_cast<uint64_t>(a.get_int("seed"));
  const uint64_t offset = static_cast<uint64_t>(a.get_int("offset"));
  const int64_t n = x.numel();
  Tensor out = Tensor::empty(x.shape(), values ? x.options() : TensorOptions(DType::kBool, x.device()));
  if (n == 0) return {out};
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  const unsigned grid = grid_for((n + 3) / 4);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const C scale = static_cast<C>(a.get_double("scale"));
    void* o = out.data_ptr();
    const bool vectorized = reinterpret_cast<uintptr_t>(xp) % sizeof(Quad<T>) == 0 &&
                            reinterpret_cast<uintptr_t>(o) % (values ? sizeof(Quad<T>) : sizeof(Quad<bool>)) == 0;
    if (random) {
      if (values) {
        stream_kernel<T, true, true>
            <<<grid, kThreads, 0, stream>>>(xp, o, n, threshold, p, seed, offset, scale, vectorized);
      } else {
        stream_kernel<T, true, false>
            <<<grid, kThreads, 0, stream>>>(xp, o, n, threshold, p, seed, offset, scale, vectorized);
      }
    } else {
      if (values) {
        stream_kernel<T, false, true>
            <<<grid, kThreads, 0, stream>>>(xp, o, n, threshold, p, seed, offset, scale, vectorized);
      } else {
        stream_kernel<T, false, false>
            <<<grid, kThreads, 0, stream>>>(xp, o, n, threshold, p, seed, offset, scale, vectorized);
      }
    }
  });
  check_launch(op);
  return {out};
}

template <typename T, typename K>
__global__ void topk_keys(const T* __restrict__ x, K* __restrict__ keys, int32_t* __restrict__ ids, int64_t n,
                          bool magnitude) {
  COPPICE_KERNEL_LOOP(i, n) {
    keys[i] = static_cast<K>(~key_of<T>(x[i], magnitude));  // ascending sort = largest first
    ids[i] = static_cast<int32_t>(i);
  }
}

__global__ void keep_first(const int32_t* __restrict__ ids, int64_t k, bool* __restrict__ out) {
  COPPICE_KERNEL_LOOP(i, k) out[ids[i]] = true;
}

std::vector<Tensor> sparsify_topk_mask(const std::vector<Tensor>& in, const Attrs& a) {
  constexpr const char* op = op::kSparsifyTopkMask;
  check_inputs(in, 1, op);
  check_contiguous_cuda(in[0], op, "keys");
  const Tensor& keys = in[0];
  const int64_t n = keys.numel(), k = a.get_int("k");
  const bool magnitude = a.get_bool("magnitude");
  COPPICE_CHECK(k >= 0 && k <= n, op, ": cannot keep ", k, " of ", n, " elements");
  COPPICE_CHECK(n < INT_MAX, op, ": the CUDA kernel sorts fewer than 2^31 elements, got ", n);
  const Device device = keys.device();
  Tensor out = Tensor::empty(keys.shape(), TensorOptions(DType::kBool, device));
  if (k == 0 || k == n) {
    out.fill_(k == n ? 1.0 : 0.0);
    return {out};
  }
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  const TensorOptions i32(DType::kI32, device);
  Tensor id_buf[2] = {Tensor::empty({n}, i32), Tensor::empty({n}, i32)};
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using K = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    const TensorOptions key_options(sizeof(K) == 8 ? DType::kI64 : DType::kI32, device);
    Tensor key_buf[2] = {Tensor::empty({n}, key_options), Tensor::empty({n}, key_options)};
    SortBuffers<K> sb;
    sb.keys[0] = static_cast<K*>(key_buf[0].data_ptr());
    sb.keys[1] = static_cast<K*>(key_buf[1].data_ptr());
    sb.values[0] = id_buf[0].data<int32_t>();
    sb.values[1] = id_buf[1].data<int32_t>();
    topk_keys<T, K><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(keys.data_ptr()), sb.keys[0],
                                                          sb.values[0], n, magnitude);
    check_launch(op);
    radix_sort_pairs(sb, static_cast<int>(n), sizeof(K) * 8, device);
    out.zero_();
    keep_first<<<grid_for(k), kThreads, 0, stream>>>(sb.values[sb.current_value], k, out.data<bool>());
    check_launch(op);
  };
  if (keys.dtype() == DType::kF64) {
    run(TypeTag<double>{});
  } else {
    check_dtype(keys, DType::kF32, op, "keys");
    run(TypeTag<float>{});
  }
  return {out};
}

// Block scores in two passes (mask_keys.h's order): a thread per row of a
// block, then a thread per block adding its rows' sums in row order. A thread
// per block alone had 1024 dependent adds for a 32x32 block and too few
// threads to hide them (0.15 ms for 4M entries on an H100).
template <typename T>
__global__ void block_row_kernel(const T* __restrict__ x, int64_t cols, int64_t bw, bool l1, int64_t nbc, int64_t rows,
                                 double* __restrict__ row_scores) {
  COPPICE_KERNEL_LOOP(i, rows * nbc) {
    const int64_t r = i / nbc, bc = i % nbc;
    row_scores[i] = block_row_score(x + r * cols + bc * bw, bw, l1);
  }
}

__global__ void block_sum_kernel(const double* __restrict__ row_scores, int64_t bh, int64_t nbc, int64_t nblocks,
                                 double* __restrict__ out) {
  COPPICE_KERNEL_LOOP(i, nblocks) {
    const int64_t br = i / nbc, bc = i % nbc;
    double s = 0.0;
    for (int64_t r = 0; r < bh; ++r) s = add_rn(s, row_scores[(br * bh + r) * nbc + bc]);
    out[i] = s;
  }
}

std::vector<Tensor> sparsify_block_scores(const std::vector<Tensor>& in, const Attrs& a) {
  constexpr const char* op = op::kSparsifyBlockScores;
  check_inputs(in, 1, op);
  check_contiguous_cuda(in[0], op, "input");
  check_ndim(in[0], 2, op, "input");
  const Tensor& x = in[0];
  const int64_t bh = a.get_int("block_rows"), bw = a.get_int("block_cols");
  const bool l1 = a.get_bool("l1");
  COPPICE_CHECK(bh > 0 && bw > 0 && x.size(0) % bh == 0 && x.size(1) % bw == 0, op, ": block ", bh, "x", bw,
                " does not divide the shape ", shape_to_string(x.shape()));
  const int64_t cols = x.size(1), nbr = x.size(0) / bh, nbc = cols / bw, nblocks = nbr * nbc;
  Tensor out = Tensor::empty({nbr, nbc}, TensorOptions(DType::kF64, x.device()));
  if (nblocks == 0) return {out};
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  const int64_t rows = x.size(0);
  Tensor row_scores = Tensor::empty({rows, nbc}, TensorOptions(DType::kF64, x.device()));
  if (x.dtype() == DType::kF64) {
    block_row_kernel<double><<<grid_for(rows * nbc), kThreads, 0, stream>>>(x.data<double>(), cols, bw, l1, nbc, rows,
                                                                            row_scores.data<double>());
  } else {
    check_dtype(x, DType::kF32, op, "input");
    block_row_kernel<float><<<grid_for(rows * nbc), kThreads, 0, stream>>>(x.data<float>(), cols, bw, l1, nbc, rows,
                                                                           row_scores.data<double>());
  }
  check_launch(op);
  block_sum_kernel<<<grid_for(nblocks), kThreads, 0, stream>>>(row_scores.data<double>(), bh, nbc, nblocks,
                                                               out.data<double>());
  check_launch(op);
  return {out};
}

template <typename T>
__global__ void nm_kernel(const T* __restrict__ x, int64_t size, int64_t inner, int64_t n, int64_t m, int64_t groups,
                          bool* __restrict__ out) {
  const int64_t gpo = size / m * inner;
  COPPICE_KERNEL_LOOP(g, groups) {
    const int64_t o = g / gpo, r = g % gpo, base = o * size * inner + (r / inner) * m * inner + r % inner;
    nm_group(x + base, inner, n, m, out + base);
  }
}

std::vector<Tensor> sparsify_nm_mask(const std::vector<Tensor>& in, const Attrs& a) {
  constexpr const char* op = op::kSparsifyNmMask;
  check_inputs(in, 1, op);
  check_contiguous_cuda(in[0], op, "input");
  check_ndim(in[0], 3, op, "input");
  const Tensor& x = in[0];
  const int64_t n = a.get_int("n"), m = a.get_int("m");
  const int64_t size = x.size(1), inner = x.size(2);
  COPPICE_CHECK(n >= 1 && n <= m && size % m == 0, op, ": bad n:m ", n, ":", m, " for a dim of size ", size);
  const int64_t groups = x.size(0) * (size / m) * inner;
  Tensor out = Tensor::empty(x.shape(), TensorOptions(DType::kBool, x.device()));
  if (groups == 0) return {out};
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  if (x.dtype() == DType::kF64) {
    nm_kernel<double>
        <<<grid_for(groups), kThreads, 0, stream>>>(x.data<double>(), size, inner, n, m, groups, out.data<bool>());
  } else {
    check_dtype(x, DType::kF32, op, "input");
    nm_kernel<float>
        <<<grid_for(groups), kThreads, 0, stream>>>(x.data<float>(), size, inner, n, m, groups, out.data<bool>());
  }
  check_launch(op);
  return {out};
}

const KernelRegistrar kStream(op::kSparsifyStream, DeviceType::kCuda, {"dense"}, sparsify_stream);
const KernelRegistrar kTopk(op::kSparsifyTopkMask, DeviceType::kCuda, {"dense"}, sparsify_topk_mask);
const KernelRegistrar kBlock(op::kSparsifyBlockScores, DeviceType::kCuda, {"dense"}, sparsify_block_scores);
const KernelRegistrar kNm(op::kSparsifyNmMask, DeviceType::kCuda, {"dense"}, sparsify_nm_mask);

}  // namespace
}  // namespace coppice::cuda
