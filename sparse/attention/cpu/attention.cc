// Attention on the CPU (sparse/attention/attention.h): one query at a time, its scores
// in a row buffer, in the compute dtype (f32 for bf16/f16). The CUDA kernels'
// twin and the ground truth of their parity tests, and the float64 route that
// gradcheck differentiates.
#include "sparse/attention/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/op_table.h"

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

// Token i of head n (= batch * heads + head) of a [N, T, d] tensor (heads 1)
// or a [B, T, H, d] view: its rows, wherever its strides put them.
template <typename T>
class Rows {
 public:
  explicit Rows(const Tensor& x)
      : base_(x.data<T>()),
        heads_(x.dim() == 4 ? x.size(2) : 1),
        batch_(x.strides()[0]),
        head_(x.dim() == 4 ? x.strides()[2] : 0),
        token_(x.strides()[1]) {}
  T* operator()(int64_t n, int64_t i) const {
    return base_ + (n / heads_) * batch_ + (n % heads_) * head_ + i * token_;
  }

 private:
  T* base_;
  int64_t heads_, batch_, head_, token_;
};

struct Sizes {
  int64_t n, t, d;
};
Sizes sizes_of(const Tensor& q) {
  const int64_t heads = q.dim() == 4 ? q.size(2) : 1;
  return {q.size(0) * heads, q.size(1), q.size(q.dim() - 1)};
}

std::vector<Tensor> attention_forward(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 3 + kAttentionWalks, "attention_forward: expected ", 3 + kAttentionWalks, " inputs, got ",
                in.size());
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const Sizes z = sizes_of(q);
  const int64_t n = z.n, t = z.t, d = z.d;  // plain locals: C++17 lambdas cannot capture bindings
  const double scale = attrs.get_double("scale");
  const VisibleKeys keys(in, 3, attrs, t);
  Tensor out = Tensor::empty(q.shape(), q.options());
  Tensor lse = Tensor::empty({n, t}, TensorOptions(q.dtype() == DType::kF64 ? DType::kF64 : DType::kF32, q.device()));
  dispatch_floating(q.dtype(), op::kAttentionForward, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Rows<T> qr(q), kr(k), vr(v), outr(out);
    parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      std::vector<C> s(static_cast<size_t>(t)), acc(static_cast<size_t>(d));
      for (int64_t h = b; h < e; ++h) {
        L* lh = lse.data<L>() + h * t;
        for (int64_t i = 0; i < t; ++i) {
          C m = -std::numeric_limits<C>::infinity();
          keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) {
              s[j] = C(scale) * dot<C>(qr(h, i), kr(h, j), d);
              m = std::max(m, s[j]);
            }
          });
          std::fill(acc.begin(), acc.end(), C(0));
          C l = 0;
          keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
            for (int64_t j = j0; j < j1; ++j) {
              const C p = std::exp(s[j] - m);
              l += p;
              const T* vj = vr(h, j);
              for (int64_t c = 0; c < d; ++c) acc[c] += p * C(vj[c]);
            }
          });
          const bool seen = l > C(0);
          T* oi = outr(h, i);
          for (int64_t c = 0; c < d; ++c) oi[c] = T(seen ? acc[c] / l : C(0));
          lh[i] = L(seen ? m + std::log(l) : -std::numeric_limits<C>::infinity());
        }
      }
    });
  });
  return {out, lse};
}

// Writes dq, dk and dv (inputs 6..8, any layout) in place.
std::vector<Tensor> attention_backward(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 9 + kAttentionWalks, "attention_backward: expected ", 9 + kAttentionWalks, " inputs, got ",
                in.size());
  const Tensor &q = in[0], &k = in[1], &v = in[2], &out = in[3], &lse = in[4], &dout = in[5];
  const Sizes z = sizes_of(q);
  const int64_t n = z.n, t = z.t, d = z.d;  // plain locals: C++17 lambdas cannot capture bindings
  const double scale = attrs.get_double("scale");
  const VisibleKeys keys(in, 9, attrs, t);
  dispatch_floating(q.dtype(), op::kAttentionBackward, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Rows<T> qr(q), kr(k), vr(v), outr(out), doutr(dout), dqr(in[6]), dkr(in[7]), dvr(in[8]);
    parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      const size_t td = static_cast<size_t>(t * d);
      std::vector<C> gq(static_cast<size_t>(d)), gk(td), gv(td);
      for (int64_t h = b; h < e; ++h) {
        const L* lh = lse.data<L>() + h * t;
        std::fill(gk.begin(), gk.end(), C(0));
        std::fill(gv.begin(), gv.end(), C(0));
        for (int64_t i = 0; i < t; ++i) {
          std::fill(gq.begin(), gq.end(), C(0));
          const C row_lse = C(lh[i]);
          const T *qi = qr(h, i), *doi = doutr(h, i);
          if (std::isfinite(row_lse)) {
            const C big_d = dot<C>(doi, outr(h, i), d);
            keys.for_each_range(i, [&](int64_t j0, int64_t j1) {
              for (int64_t j = j0; j < j1; ++j) {
                const T *kj = kr(h, j), *vj = vr(h, j);
                const C p = std::exp(C(scale) * dot<C>(qi, kj, d) - row_lse);
                const C ds = p * (dot<C>(doi, vj, d) - big_d);
                for (int64_t c = 0; c < d; ++c) {
                  gv[j * d + c] += p * C(doi[c]);
                  gq[c] += C(scale) * ds * C(kj[c]);
                  gk[j * d + c] += C(scale) * ds * C(qi[c]);
                }
              }
            });
          }
          T* dqi = dqr(h, i);
          for (int64_t c = 0; c < d; ++c) dqi[c] = T(gq[c]);
        }
        for (int64_t j = 0; j < t; ++j) {
          T *dkj = dkr(h, j), *dvj = dvr(h, j);
          for (int64_t c = 0; c < d; ++c) {
            dkj[c] = T(gk[j * d + c]);
            dvj[c] = T(gv[j * d + c]);
          }
        }
      }
    });
  });
  return {in[6], in[7], in[8]};
}

const KernelRegistrar forward_reg(op::kAttentionForward, DeviceType::kCpu, attention_kernel_formats(3, false),
                                  attention_forward);
const KernelRegistrar forward_layout_reg(op::kAttentionForward, DeviceType::kCpu, attention_kernel_formats(3, true),
                                         attention_forward);
const KernelRegistrar backward_reg(op::kAttentionBackward, DeviceType::kCpu, attention_kernel_formats(9, false),
                                   attention_backward);
const KernelRegistrar backward_layout_reg(op::kAttentionBackward, DeviceType::kCpu, attention_kernel_formats(9, true),
                                          attention_backward);

}  // namespace
}  // namespace coppice::cpu
