// SDDMM on the CPU: "sddmm"(a [m, k], b [k, n], pattern [m, n]) = (a @ b) at
// the pattern's stored positions, as the pattern's format and pattern version
// (with_values). Each stored value is a dot product of a row of a with a row
// of b^T, both contiguous (b^T is b's own storage when b is a transposed
// view, e.g. x.t() in the gradient of SpMM). bf16/f16 compute in f32.
#include <vector>

#include "sparse/convert.h"
#include "sparse/cpu/spmm_kernels.h"
#include "sparse/cpu/util.h"

namespace coppice::sparse_cpu {
namespace {

template <typename T>
inline T dot(const T* __restrict a, const T* __restrict b, int64_t k) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::kLanes;
  V s0 = V{}, s1 = V{};
  int64_t j = 0;
  for (; j + 2 * L <= k; j += 2 * L) {
    V x0, y0, x1, y1;
    std::memcpy(&x0, a + j, sizeof(V));
    std::memcpy(&y0, b + j, sizeof(V));
    std::memcpy(&x1, a + j + L, sizeof(V));
    std::memcpy(&y1, b + j + L, sizeof(V));
    s0 += x0 * y0;
    s1 += x1 * y1;
  }
  s0 += s1;
  T s = 0;
  for (int i = 0; i < L; ++i) s += s0[i];
  for (; j < k; ++j) s += a[j] * b[j];
  return s;
}

std::vector<Tensor> sddmm(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = "sddmm";
  COPPICE_CHECK(in.size() == 3, op, ": expected 3 inputs (a, b, pattern), got ", in.size());
  check_inputs({in[0], in[1]}, 2, op);
  const Tensor& pattern = in[2];
  check_matrix(in[0], op, "a");
  check_matrix(in[1], op, "b");
  check_matrix(pattern, op, "pattern");
  const int64_t m = in[0].size(0), k = in[0].size(1), n = in[1].size(1);
  COPPICE_CHECK(in[1].size(0) == k, op, ": inner dimensions differ: a is ", shape_to_string(in[0].shape()), ", b is ",
                shape_to_string(in[1].shape()));
  COPPICE_CHECK(pattern.size(0) == m && pattern.size(1) == n, op, ": pattern has shape ",
                shape_to_string(pattern.shape()), ", expected [", m, ", ", n, "] (the shape of a @ b)");
  const DType dtype = in[0].dtype(), acc = accumulate_dtype(dtype);
  const Tensor a = contiguous_as(in[0], acc);
  const Tensor bt = contiguous_as(in[1].t(), acc);  // a view of b's storage when b = x.t()
  const Shape value_shape = values(pattern).shape();
  Tensor out = Tensor::empty(value_shape, TensorOptions(acc, pattern.device()));
  dispatch_floating(acc, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pa = a.data<T>();
      const T* pb = bt.data<T>();
      T* po = out.data<T>();
      if (pattern.layout() == Layout::kCsr) {
        // Row by row: a's row stays in cache for the row's entries.
        const CompressedImpl& c = csr_impl(pattern, op);
        const int32_t* ptr = c.pointers().data<int32_t>();
        const int32_t* col = c.indices().data<int32_t>();
        const int64_t grain =
            std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k * (c.nnz() / std::max<int64_t>(m, 1) + 1)));
        cpu::parallel_for(0, m, grain, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t e = ptr[r]; e < ptr[r + 1]; ++e) po[e] = dot<T>(pa + r * k, pb + col[e] * k, k);
          }
        });
        return;
      }
      // Any other format: by stored position (zero where nothing is stored).
      const std::vector<int64_t> pos = stored_positions(pattern);
      const int64_t slots = static_cast<int64_t>(pos.size());
      cpu::parallel_for(0, slots, std::max<int64_t>(1, 65536 / std::max<int64_t>(k, 1)), [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s) {
          const int64_t p = pos[static_cast<size_t>(s)];
          po[s] = p < 0 ? T(0) : dot<T>(pa + (p / n) * k, pb + (p % n) * k, k);
        }
      });
    }
  });
  return {with_values(pattern, out.to(dtype))};
}

const bool kRegistered = [] {
  for (const std::string& f : builtin_formats()) register_cpu("sddmm", {{"dense", "dense", f}}, sddmm);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cpu
