// topk over the last dim of x [outer, r]: values [outer, k] and i64 indices,
// sorted (descending when largest, ascending otherwise), ties broken by the
// lower index first. NaN counts as larger than every number (as in PyTorch):
// first when largest, last otherwise. Any dtype (bool orders false < true).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tensor/cpu/loops.h"
#include "tensor/dispatcher.h"

namespace coppice::cpu {
namespace {

// a > b with NaN above everything (two NaNs are equal).
template <typename C>
bool greater(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(b)) return false;
    if (std::isnan(a)) return true;
  }
  return a > b;
}

std::vector<Tensor> topk(const Tensor& input, int64_t k, bool largest) {
  check_ndim(input, 2, op::kTopk, "input");
  Tensor x = input.contiguous();
  const int64_t outer = x.size(0), r = x.size(1);
  COPPICE_CHECK(k >= 0 && k <= r, "topk: k = ", k, " is out of range for a dimension of size ", r);
  Tensor values = Tensor::empty({outer, k}, x.options());
  Tensor indices = Tensor::empty({outer, k}, TensorOptions(DType::kI64, x.device()));
  if (values.numel() == 0) return {values, indices};
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    parallel_for(0, outer, std::max<int64_t>(1, kGrain / (8 * r)), [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(static_cast<size_t>(r));
      std::vector<C> row(static_cast<size_t>(r));
      for (int64_t o = b; o < e; ++o) {
        for (int64_t i = 0; i < r; ++i) row[i] = static_cast<C>(px[o * r + i]);
        std::iota(order.begin(), order.end(), int64_t{0});
        // A strict weak order: by value (the wanted direction), then by index.
        auto before = [&](int64_t i, int64_t j) {
          const C a = row[i], c = row[j];
          if (largest ? greater(a, c) : greater(c, a)) return true;
          if (largest ? greater(c, a) : greater(a, c)) return false;
          return i < j;
        };
        if (4 * k >= r) {
          std::sort(order.begin(), order.end(), before);
        } else {
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        }
        for (int64_t j = 0; j < k; ++j) {
          pv[o * k + j] = px[o * r + order[j]];
          pi[o * k + j] = order[j];
        }
      }
    });
  });
  return {values, indices};
}

KernelRegistrar topk_reg(op::kTopk, DeviceType::kCpu, {"dense"},
                         [](const std::vector<Tensor>& in, const Attrs& attrs) -> std::vector<Tensor> {
                           COPPICE_CHECK(in.size() == 1, "topk: expected 1 input, got ", in.size());
                           return topk(in[0], attrs.get_int("k"), attrs.get_bool("largest", true));
                         });

}  // namespace
}  // namespace coppice::cpu
