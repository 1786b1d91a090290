// embedding_bag (kernels.h): bag b's row is the sum, in entry order and in
// the compute type, of weight's rows at its entries (each times its
// per-sample weight), entries equal to padding_idx skipped, divided by the
// count of the others in mean mode (an empty bag, or one of padding only, is
// zeros), rounded once; in max mode each column's largest (the first in
// entry order, a NaN taking the place of any number) and its entry's
// position. The CUDA kernel's twin: the same order, the same roundings, the
// same ties, so the two agree bit for bit. The frontend
// (tensor/ops_embedding_bag.cc) has checked the offsets; indices are checked
// here, before anything is written, naming the first bad one.
#include <algorithm>
#include <string>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

// Each column's largest over the bag's entries (padding skipped): the first
// in entry order, a NaN replacing any number; 0 and position -1 where the
// bag has no entry. Fills `out`, returns the positions.
Tensor bag_max(const Tensor& w, const int64_t* ix, const int64_t* off, int64_t padding, Tensor& out) {
  const int64_t d = w.size(1), bags = out.size(0);
  Tensor at = Tensor::empty({bags, d}, TensorOptions(DType::kI64));
  int64_t* pa = at.data<int64_t>();
  dispatch_floating(w.dtype(), op::kEmbeddingBag, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pw = w.data<T>();
    T* po = out.data<T>();
    parallel_for(0, bags, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t c = 0; c < d; ++c) {
          C best = C(0);
          int64_t where = -1;
          for (int64_t e = off[b]; e < off[b + 1]; ++e) {
            if (ix[e] == padding) continue;
            const C value = C(pw[ix[e] * d + c]);
            if (where < 0 || value > best || (value != value && best == best)) {
              best = value;
              where = e;
            }
          }
          po[b * d + c] = T(best);
          pa[b * d + c] = where;
        }
      }
    });
  });
  return at;
}

std::vector<Tensor> embedding_bag(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kEmbeddingBag;
  const Tensor w = in[0].contiguous(), index = in[1].contiguous(), offsets = in[2].contiguous();
  const Tensor psw = in.size() > 3 && in[3].defined() ? in[3].contiguous() : Tensor();
  const std::string mode = attrs.get_string("mode");
  COPPICE_CHECK(mode == "sum" || mode == "mean" || mode == "max", op, ": mode must be sum, mean or max, got '", mode,
                "'");
  const bool mean = mode == "mean", max = mode == "max";
  const int64_t padding = attrs.get_int("padding_idx");
  const int64_t v = w.size(0), d = w.size(1), n = index.numel(), bags = offsets.numel() - 1;
  const int64_t* ix = index.data<int64_t>();
  const int64_t* off = offsets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    COPPICE_CHECK(ix[i] >= 0 && ix[i] < v, op, ": index ", ix[i], " (at position ", i,
                  ") is out of range for dim 0 of size ", v);
  }
  Tensor out = Tensor::empty({bags, d}, w.options());
  if (max) return {out, bag_max(w, ix, off, padding, out)};
  dispatch_floating(w.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pw = w.data<T>();
    const T* ps = psw.defined() ? psw.data<T>() : nullptr;
    T* po = out.data<T>();
    parallel_for(0, bags, 1, [&](int64_t b0, int64_t b1) {
      std::vector<C> acc(static_cast<size_t>(d));
      for (int64_t b = b0; b < b1; ++b) {
        std::fill(acc.begin(), acc.end(), C(0));
        int64_t count = 0;
        for (int64_t e = off[b]; e < off[b + 1]; ++e) {
          if (ix[e] == padding) continue;
          ++count;
          const T* row = pw + ix[e] * d;
          if (ps != nullptr) {
            const C s = C(ps[e]);
            for (int64_t c = 0; c < d; ++c) acc[c] += C(row[c]) * s;
          } else {
            for (int64_t c = 0; c < d; ++c) acc[c] += C(row[c]);
          }
        }
        // A division, not a multiplication by 1/count: the CUDA twin divides too.
        const C divisor = mean && count > 0 ? C(count) : C(1);
        for (int64_t c = 0; c < d; ++c) po[b * d + c] = T(acc[c] / divisor);
      }
    });
  });
  return {out};
}

const KernelRegistrar embedding_bag_reg(op::kEmbeddingBag, DeviceType::kCpu, {"dense", "dense", "dense", "none"},
                                        embedding_bag);
const KernelRegistrar embedding_bag_weighted_reg(op::kEmbeddingBag, DeviceType::kCpu,
                                                 {"dense", "dense", "dense", "dense"}, embedding_bag);

}  // namespace
}  // namespace coppice::cpu
