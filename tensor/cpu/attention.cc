// Attention on the CPU (tensor/attention.h): one query at a time, its scores
// in a row buffer, in the compute dtype (f32 for bf16/f16). The CUDA kernels'
// twin and the ground truth of their parity tests, and the float64 route that
// gradcheck differentiates.
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/loops.h"

namespace coppice::cpu {
namespace {

// The keys query i sees, as [begin, end) ranges in increasing order.
class VisibleKeys {
 public:
  VisibleKeys(const std::vector<Tensor>& in, size_t layout_at, const Attrs& attrs, int64_t t)
      : t_(t), causal_(attrs.get_bool("causal")), block_(attrs.get_int("block")) {
    if (block_ > 0) {
      row_ptr_ = in[layout_at].data<int32_t>();
      col_idx_ = in[layout_at + 1].data<int32_t>();
    }
  }

  template <typename Fn>
  void for_each_range(int64_t i, Fn&& fn) const {
    const int64_t last = causal_ ? i + 1 : t_;  // keys j < last
    if (block_ == 0) {
      fn(int64_t{0}, last);
      return;
    }
    const int64_t qb = i / block_;
    for (int32_t e = row_ptr_[qb]; e < row_ptr_[qb + 1]; ++e) {
      const int64_t begin = int64_t{col_idx_[e]} * block_;
      const int64_t end = std::min(begin + block_, last);
      if (begin < end) fn(begin, end);
    }
  }

 private:
  int64_t t_;
  bool causal_;
  int64_t block_;
  const int32_t* row_ptr_ = nullptr;
  const int32_t* col_idx_ = nullptr;
};

template <typename C, typename T>
C dot(const T* a, const T* b, int64_t d) {
  C s = 0;
  for (int64_t c = 0; c < d; ++c) s += C(a[c]) * C(b[c]);
  return s;
}

std::vector<Tensor> attention_forward(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 7, "attention_forward: expected 7 inputs, got ", in.size());
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const int64_t n = q.size(0), t = q.size(1), d = q.size(2);
  const double scale = attrs.get_double("scale");
  const VisibleKeys keys(in, 3, attrs, t);
  Tensor out = Tensor::empty(q.shape(), q.options());
  Tensor lse = Tensor::empty({n, t}, TensorOptions(q.dtype() == DType::kF64 ? DType::kF64 : DType::kF32, q.device()));
  dispatch_floating(q.dtype(), "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      std::vector<C> s(static_cast<size_t>(t)), acc(static_cast<size_t>(d));
      for (int64_t h = b; h < e; ++h) {
        const T *qh = q.data<T>() + h * t * d, *kh = k.data<T>() + h * t * d, *vh = v.data<T>() + h * t * d;
        T* oh = out.data<T>() + h * t * d;
        L* lh = lse.data<L>() + h * t;
        for (int64_t i = 0; i < t; ++i) {
          C m = -std::numeric_limits<C>::infinity();
          keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) {
              s[j] = C(scale) * dot<C>(qh + i * d, kh + j * d, d);
              m = std::max(m, s[j]);
            }
          });
          std::fill(acc.begin(), acc.end(), C(0));
          C l = 0;
          keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) {
              const C p = std::exp(s[j] - m);
              l += p;
              for (int64_t c = 0; c < d; ++c) acc[c] += p * C(vh[j * d + c]);
            }
          });
          const bool seen = l > C(0);
          for (int64_t c = 0; c < d; ++c) oh[i * d + c] = T(seen ? acc[c] / l : C(0));
          lh[i] = L(seen ? m + std::log(l) : -std::numeric_limits<C>::infinity());
        }
      }
    });
  });
  return {out, lse};
}

std::vector<Tensor> attention_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 10, "attention_backward: expected 10 inputs, got ", in.size());
  const Tensor &q = in[0], &k = in[1], &v = in[2], &out = in[3], &lse = in[4], &dout = in[5];
  const int64_t n = q.size(0), t = q.size(1), d = q.size(2);
  const double scale = attrs.get_double("scale");
  const VisibleKeys keys(in, 6, attrs, t);
  Tensor dq = Tensor::empty(q.shape(), q.options()), dk = Tensor::empty(q.shape(), q.options()),
         dv = Tensor::empty(q.shape(), q.options());
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      const size_t td = static_cast<size_t>(t * d);
      std::vector<C> gq(static_cast<size_t>(d)), gk(td), gv(td);
      for (int64_t h = b; h < e; ++h) {
        const int64_t off = h * t * d;
        const T *qh = q.data<T>() + off, *kh = k.data<T>() + off, *vh = v.data<T>() + off;
        const T *oh = out.data<T>() + off, *doh = dout.data<T>() + off;
        const L* lh = lse.data<L>() + h * t;
        std::fill(gk.begin(), gk.end(), C(0));
        std::fill(gv.begin(), gv.end(), C(0));
        for (int64_t i = 0; i < t; ++i) {
          std::fill(gq.begin(), gq.end(), C(0));
          const C row_lse = C(lh[i]);
          if (std::isfinite(row_lse)) {
            const C big_d = dot<C>(doh + i * d, oh + i * d, d);
            keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
              for (int64_t j = j0; j < j1; ++j) {
                const C p = std::exp(C(scale) * dot<C>(qh + i * d, kh + j * d, d) - row_lse);
                const C ds = p * (dot<C>(doh + i * d, vh + j * d, d) - big_d);
                for (int64_t c = 0; c < d; ++c) {
                  gv[j * d + c] += p * C(doh[i * d + c]);
                  gq[c] += C(scale) * ds * C(kh[j * d + c]);
                  gk[j * d + c] += C(scale) * ds * C(qh[i * d + c]);
                }
              }
            });
          }
          for (int64_t c = 0; c < d; ++c) dq.data<T>()[off + i * d + c] = T(gq[c]);
        }
        for (size_t x = 0; x < td; ++x) {
          dk.data<T>()[off + static_cast<int64_t>(x)] = T(gk[x]);
          dv.data<T>()[off + static_cast<int64_t>(x)] = T(gv[x]);
        }
      }
    });
  });
  return {dq, dk, dv};
}

// With a block layout (its four index tensors) and without ("none").
std::vector<std::string> formats(int dense, bool layout) {
  std::vector<std::string> f(static_cast<size_t>(dense), "dense");
  f.insert(f.end(), 4, layout ? "dense" : "none");
  return f;
}
const KernelRegistrar forward_reg("attention_forward", DeviceType::kCpu, formats(3, false), attention_forward);
const KernelRegistrar forward_layout_reg("attention_forward", DeviceType::kCpu, formats(3, true), attention_forward);
const KernelRegistrar backward_reg("attention_backward", DeviceType::kCpu, formats(6, false), attention_backward);
const KernelRegistrar backward_layout_reg("attention_backward", DeviceType::kCpu, formats(6, true), attention_backward);

}  // namespace
}  // namespace coppice::cpu
