// embedding_bag (kernels.h): bag b's row is the sum, in entry order and in
// the compute type, of weight's rows at its entries (each times its
// per-sample weight), entries equal to padding_idx skipped, divided by the
// count of the others in mean mode (an empty bag, or one of padding only, is
// zeros), rounded once. The CUDA kernel's twin: the same order, the same
// roundings, so the two agree bit for bit. The frontend
// (tensor/ops_embedding_bag.cc) has checked the offsets; indices are checked
// here, before anything is written, naming the first bad one.
#include <algorithm>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

std::vector<Tensor> embedding_bag(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kEmbeddingBag;
  const Tensor w = in[0].contiguous(), index = in[1].contiguous(), offsets = in[2].contiguous();
  const Tensor psw = in.size() > 3 && in[3].defined() ? in[3].contiguous() : Tensor();
  const bool mean = attrs.get_bool("mean");
  const int64_t padding = attrs.get_int("padding_idx");
  const int64_t v = w.size(0), d = w.size(1), n = index.numel(), bags = offsets.numel() - 1;
  const int64_t* ix = index.data<int64_t>();
  const int64_t* off = offsets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    COPPICE_CHECK(ix[i] >= 0 && ix[i] < v, op, ": index ", ix[i], " (at position ", i,
                  ") is out of range for dim 0 of size ", v);
  }
  Tensor out = Tensor::empty({bags, d}, w.options());
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
