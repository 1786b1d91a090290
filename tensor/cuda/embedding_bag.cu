// embedding_bag (kernels.h), the twin of tensor/cpu/embedding_bag.cc: a
// thread per (bag, column) walks its bag's entries in order, sums in the
// compute type and rounds once (or keeps the first largest, a NaN winning,
// and its position, in max mode), so the result is the CPU's bit for bit and
// the same on every run (no atomics: each output element has one writer).
// Neighbouring threads take neighbouring columns of one row of weight, so
// the reads of a row coalesce. Indices are checked first (index_check.cuh:
// the first bad position is reported, nothing bad is dereferenced).
#include <cstdint>
#include <string>

#include "tensor/cuda/checks.h"
#include "tensor/cuda/convert.h"
#include "tensor/cuda/index_check.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/op_table.h"

namespace coppice::cuda {
namespace {

__global__ void bag_index_check(const int64_t* index, int64_t n, int64_t v, int64_t* bad) {
  COPPICE_KERNEL_LOOP(i, n) {
    if (index[i] < 0 || index[i] >= v) report_bad_index(bad, i);
  }
}

// A product rounded on its own, never fused into the following add (nvcc
// contracts a * b + c into an FMA by default; the CPU twin, built without
// FMA, rounds the product first).
__device__ inline float product(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double product(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__global__ void embedding_bag_kernel(const T* w, const int64_t* index, const int64_t* offsets, const T* psw, T* out,
                                     int64_t v, int64_t bags, int64_t d, int64_t padding, bool mean) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(x, bags * d) {
    const int64_t b = x / d, c = x % d;
    C s = 0;
    int64_t count = 0;
    for (int64_t e = offsets[b]; e < offsets[b + 1]; ++e) {
      const int64_t k = index[e];
      if (k == padding || k < 0 || k >= v) continue;  // out of range: reported by bag_index_check
      ++count;
      const C value = convert<C>(w[k * d + c]);
      s += psw != nullptr ? product(value, convert<C>(psw[e])) : value;
    }
    const C divisor = mean && count > 0 ? C(count) : C(1);
    out[x] = convert<T>(s / divisor);
  }
}

template <typename T>
__global__ void embedding_bag_max_kernel(const T* w, const int64_t* index, const int64_t* offsets, T* out,
                                         int64_t* where_out, int64_t v, int64_t bags, int64_t d, int64_t padding) {
  using C = compute_t<T>;
  COPPICE_KERNEL_LOOP(x, bags * d) {
    const int64_t b = x / d, c = x % d;
    C best = 0;
    int64_t where = -1;
    for (int64_t e = offsets[b]; e < offsets[b + 1]; ++e) {
      const int64_t k = index[e];
      if (k == padding || k < 0 || k >= v) continue;
      const C value = convert<C>(w[k * d + c]);
      if (where < 0 || value > best || (value != value && best == best)) {
        best = value;
        where = e;
      }
    }
    out[x] = convert<T>(best);
    where_out[x] = where;
  }
}

std::vector<Tensor> embedding_bag(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kEmbeddingBag;
  const Tensor w = in[0].contiguous(), index = in[1].contiguous(), offsets = in[2].contiguous();
  const Tensor psw = in.size() > 3 && in[3].defined() ? in[3].contiguous() : Tensor();
  check_cuda_tensor(w, op, "weight");
  const std::string mode = attrs.get_string("mode");
  COPPICE_CHECK(mode == "sum" || mode == "mean" || mode == "max", op, ": mode must be sum, mean or max, got '", mode,
                "'");
  const bool mean = mode == "mean", max = mode == "max";
  const int64_t padding = attrs.get_int("padding_idx");
  const int64_t v = w.size(0), d = w.size(1), n = index.numel(), bags = offsets.numel() - 1;
  const Device device = w.device();
  DeviceGuard guard(device.index);
  cudaStream_t stream = current_stream(device.index);
  if (n > 0) {
    BadIndexSlot bad(device);
    bag_index_check<<<grid_for(n), kThreads, 0, stream>>>(index.data<int64_t>(), n, v, bad.ptr());
    check_launch(op);
    bad.check(op, index, 0, v);
  }
  Tensor out = Tensor::empty({bags, d}, w.options());
  if (max) {
    Tensor where = Tensor::empty({bags, d}, TensorOptions(DType::kI64, device));
    if (bags * d == 0) return {out, where};
    dispatch_floating(w.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      embedding_bag_max_kernel<T>
          <<<grid_for(bags * d), kThreads, 0, stream>>>(w.data<T>(), index.data<int64_t>(), offsets.data<int64_t>(),
                                                        out.data<T>(), where.data<int64_t>(), v, bags, d, padding);
    });
    check_launch(op);
    return {out, where};
  }
  if (bags * d == 0) return {out};
  dispatch_floating(w.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_bag_kernel<T><<<grid_for(bags * d), kThreads, 0, stream>>>(
        w.data<T>(), index.data<int64_t>(), offsets.data<int64_t>(), psw.defined() ? psw.data<T>() : nullptr,
        out.data<T>(), v, bags, d, padding, mean);
  });
  check_launch(op);
  return {out};
}

const KernelRegistrar kEmbeddingBag(op::kEmbeddingBag, DeviceType::kCuda, {"dense", "dense", "dense", "none"},
                                    embedding_bag);
const KernelRegistrar kEmbeddingBagWeighted(op::kEmbeddingBag, DeviceType::kCuda, {"dense", "dense", "dense", "dense"},
                                            embedding_bag);

}  // namespace
}  // namespace coppice::cuda
