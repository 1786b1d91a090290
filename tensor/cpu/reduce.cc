// reduce_sum, reduce_max, reduce_min over the last dim of x [outer, r].
//
// Sums accumulate in the compute type (f32 for bf16/f16, the type itself for
// f32/f64, i64 for integers and bool), in blocks of kBlock added in order, so
// results do not depend on the thread count. Integer sums wrap on overflow.
// Max/min return the first index of the extreme value; a NaN beats any number
// (the first NaN wins), as in PyTorch.
#include <cmath>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::cpu {
namespace {

constexpr int64_t kBlock = 4096;

// [outer, r] from x (contiguous, 2-D; copies when the caller did not).
Tensor as_rows(const Tensor& x, std::string_view op) {
  check_ndim(x, 2, op, "input");
  return x.contiguous();
}

template <typename Acc, typename T>
Acc add(Acc s, T v) {
  if constexpr (std::is_integral_v<Acc>) {
    return static_cast<Acc>(static_cast<uint64_t>(s) + static_cast<uint64_t>(static_cast<Acc>(v)));
  } else {
    return s + static_cast<Acc>(v);
  }
}

// The sum of p[0..n) as a cascade of block sums, each block summed in order.
template <typename Acc, typename T>
Acc sum_row(const T* p, int64_t n) {
  Acc total = Acc(0);
  for (int64_t b = 0; b < n; b += kBlock) {
    Acc s = Acc(0);
    const int64_t e = std::min(n, b + kBlock);
    for (int64_t i = b; i < e; ++i) s = add(s, p[i]);
    total = add(total, s);
  }
  return total;
}

Tensor reduce_sum(const Tensor& input) {
  Tensor x = as_rows(input, op::kReduceSum);
  const int64_t outer = x.size(0), r = x.size(1);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::kI64;
  Tensor out = Tensor::empty({outer}, TensorOptions(out_dtype, x.device()));
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, compute_t<T>>;
    using Out = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
    const T* px = x.data<T>();
    Out* po = out.data<Out>();
    if (outer >= num_threads() || r <= kBlock) {
      parallel_for(0, outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) po[i] = Out(sum_row<Acc>(px + i * r, r));
      });
      return;
    }
    // Few long rows: sum fixed blocks in parallel, then add the block sums in order.
    const int64_t nblocks = (r + kBlock - 1) / kBlock;
    std::vector<Acc> partial(static_cast<size_t>(outer * nblocks));
    parallel_for(0, outer * nblocks, 4, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t row = k / nblocks, blk = k % nblocks;
        const int64_t start = blk * kBlock, n = std::min(kBlock, r - start);
        Acc s = Acc(0);
        const T* p = px + row * r + start;
        for (int64_t i = 0; i < n; ++i) s = add(s, p[i]);
        partial[k] = s;
      }
    });
    for (int64_t row = 0; row < outer; ++row) {
      Acc total = Acc(0);
      for (int64_t blk = 0; blk < nblocks; ++blk) total = add(total, partial[row * nblocks + blk]);
      po[row] = Out(total);
    }
  });
  return out;
}

// True when v should replace the current best (strictly better; NaN beats numbers).
template <bool kMax, typename C>
bool better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(best)) return false;
    if (std::isnan(v)) return true;
  }
  return kMax ? v > best : v < best;
}

template <bool kMax>
std::vector<Tensor> reduce_extreme(const Tensor& input, std::string_view op) {
  Tensor x = as_rows(input, op);
  const int64_t outer = x.size(0), r = x.size(1);
  COPPICE_CHECK(r > 0 || outer == 0, op, ": cannot reduce an empty dimension (input shape ", shape_to_string(x.shape()),
                ")");
  Tensor values = Tensor::empty({outer}, x.options());
  Tensor indices = Tensor::empty({outer}, TensorOptions(DType::kI64, x.device()));
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    parallel_for(0, outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const T* p = px + row * r;
        C best = static_cast<C>(p[0]);
        int64_t at = 0;
        for (int64_t i = 1; i < r; ++i) {
          const C v = static_cast<C>(p[i]);
          if (better<kMax>(v, best)) {
            best = v;
            at = i;
          }
        }
        pv[row] = p[at];
        pi[row] = at;
      }
    });
  });
  return {values, indices};
}

// x [r, inner] summed over its rows, each column in row order (floating);
// x [batch, r, inner]: each slab so, [batch, inner].
Tensor reduce_sum_cols(const Tensor& input) {
  COPPICE_CHECK((input.dim() == 2 || input.dim() == 3) && is_floating(input.dtype()),
                "reduce_sum_cols: input must be 2-D or 3-D floating, got ", shape_to_string(input.shape()), " ",
                dtype_name(input.dtype()));
  const Tensor x = input.contiguous();
  const bool batched = x.dim() == 3;
  const int64_t batch = batched ? x.size(0) : 1, r = x.size(batched ? 1 : 0), inner = x.size(batched ? 2 : 1);
  Tensor out = batched ? Tensor::empty({batch, inner}, x.options()) : Tensor::empty({inner}, x.options());
  const int64_t cols = batch * inner;
  dispatch_floating(x.dtype(), op::kReduceSumCols, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    // Columns numbered b * inner + c across the slabs, as the CUDA kernel numbers them.
    parallel_for(0, cols, std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
      std::vector<Acc> acc(static_cast<size_t>(e - b), Acc(0));
      // Row by row within each slab's share of [b, e), so the reads run along rows.
      for (int64_t cc = b; cc < e;) {
        const int64_t slab = cc / inner, c = cc - slab * inner, n = std::min(e - cc, inner - c);
        const T* rows = px + slab * r * inner + c;
        Acc* s = acc.data() + (cc - b);
        for (int64_t i = 0; i < r; ++i) {
          for (int64_t j = 0; j < n; ++j) s[j] += Acc(rows[i * inner + j]);
        }
        cc += n;
      }
      for (int64_t cc = b; cc < e; ++cc) po[cc] = T(acc[static_cast<size_t>(cc - b)]);
    });
  });
  return out;
}

// The CUDA kernel's twin: relu_backward of g at y, and its column sums
// (each column in row order, as reduce_sum_cols).
KernelRegistrar relu_col_sums_reg(op::kReluBackwardColSums, DeviceType::kCpu, {"dense", "dense"},
                                  [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                                    COPPICE_CHECK(in.size() == 2, "relu_backward_col_sums: expected 2 inputs, got ",
                                                  in.size());
                                    const Tensor g = relu_backward(in[0], in[1]);
                                    return {g, reduce_sum_cols(g)};
                                  });
KernelRegistrar sum_cols_reg(op::kReduceSumCols, DeviceType::kCpu, {"dense"},
                             [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                               COPPICE_CHECK(in.size() == 1, "reduce_sum_cols: expected 1 input, got ", in.size());
                               return {reduce_sum_cols(in[0])};
                             });
KernelRegistrar sum_reg(op::kReduceSum, DeviceType::kCpu, {"dense"},
                        [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                          COPPICE_CHECK(in.size() == 1, "reduce_sum: expected 1 input, got ", in.size());
                          return {reduce_sum(in[0])};
                        });
KernelRegistrar max_reg(op::kReduceMax, DeviceType::kCpu, {"dense"},
                        [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                          COPPICE_CHECK(in.size() == 1, "reduce_max: expected 1 input, got ", in.size());
                          return reduce_extreme<true>(in[0], op::kReduceMax);
                        });
KernelRegistrar min_reg(op::kReduceMin, DeviceType::kCpu, {"dense"},
                        [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
                          COPPICE_CHECK(in.size() == 1, "reduce_min: expected 1 input, got ", in.size());
                          return reduce_extreme<false>(in[0], op::kReduceMin);
                        });

}  // namespace
}  // namespace coppice::cpu
