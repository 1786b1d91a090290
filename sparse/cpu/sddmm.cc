// SDDMM on the CPU: "sddmm"(a [m, k], b [k, n], pattern [m, n]) = (a @ b) at
// the pattern's stored positions, as the pattern's format and pattern version
// (with_values). Each stored value is a dot product of a row of a with a row
// of b^T, both contiguous (b^T is b's own storage when b is a transposed
// view, e.g. x.t() in the gradient of SpMM). bf16/f16 compute in f32.
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/cpu/spmm_kernels.h"
#include "sparse/cpu/util.h"
#include "sparse/formats.h"
#include "sparse/levels/level_routes.h"
#include "sparse/stored_positions.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparse_cpu {
namespace {

// A pass over columns [j0, j0 + len) of a and b^T packs b^T's [n, len]
// slice into about this many contiguous bytes, which stay in cache (and in
// the TLB's reach) while every row of the pattern reads them.
constexpr int64_t kSliceBytes = 4 * 1024 * 1024;

// Sum of the lanes of v.
template <int VB, typename T>
COPPICE_INLINE T lane_sum(const typename Vec<T, VB>::type& v) {
  T s = 0;
  for (int i = 0; i < Vec<T, VB>::kLanes; ++i) s += v[i];
  return s;
}

// a[0:k] . b[0:k].
template <int VB, typename T>
COPPICE_INLINE T dot(const T* __restrict a, const T* __restrict b, int64_t k) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::kLanes;
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
  T s = lane_sum<VB, T>(s0 + s1);
  for (; j < k; ++j) s += a[j] * b[j];
  return s;
}

// a . b0, a . b1, a . b2, a . b3 over [0, k): one load of a for four products.
template <int VB, typename T>
COPPICE_INLINE void dot4(const T* __restrict a, const T* const* b, int64_t k, T* out) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::kLanes;
  V s[4] = {V{}, V{}, V{}, V{}};
  int64_t j = 0;
  for (; j + L <= k; j += L) {
    V x;
    std::memcpy(&x, a + j, sizeof(V));
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      V y;
      std::memcpy(&y, b[i] + j, sizeof(V));
      s[i] += x * y;
    }
  }
  for (int i = 0; i < 4; ++i) {
    T t = lane_sum<VB, T>(s[i]);
    for (int64_t jj = j; jj < k; ++jj) t += a[jj] * b[i][jj];
    out[i] += t;
  }
}

// One pass over columns [j0, j0 + len) of a (rows lda apart) and bt (rows
// ldb apart), for CSR rows [r0, r1): out[e] += a[r, j0:] . bt[col[e], j0:].
template <int VB, typename T>
COPPICE_INLINE void csr_rows_isa(const int32_t* ptr, const int32_t* col, const T* a, int64_t lda, const T* bt,
                                 int64_t ldb, int64_t len, int64_t r0, int64_t r1, T* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* ar = a + r * lda;
    int64_t e = ptr[r];
    const int64_t e1 = ptr[r + 1];
    for (; e + 4 <= e1; e += 4) {
      const T* b[4] = {bt + col[e] * ldb, bt + col[e + 1] * ldb, bt + col[e + 2] * ldb, bt + col[e + 3] * ldb};
      dot4<VB, T>(ar, b, len, out + e);
    }
    for (; e < e1; ++e) out[e] += dot<VB, T>(ar, bt + col[e] * ldb, len);
  }
}

// The same for stored positions [s0, s1) of an [m, n] pattern (-1: none).
template <int VB, typename T>
COPPICE_INLINE void positions_isa(const int64_t* pos, int64_t n, const T* a, int64_t lda, const T* bt, int64_t ldb,
                                  int64_t len, int64_t s0, int64_t s1, T* out) {
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t p = pos[s];
    if (p >= 0) out[s] += dot<VB, T>(a + (p / n) * lda, bt + (p % n) * ldb, len);
  }
}

template <typename T>
__attribute__((target("avx2,fma"))) void csr_rows_avx2(const int32_t* ptr, const int32_t* col, const T* a, int64_t lda,
                                                       const T* bt, int64_t ldb, int64_t len, int64_t r0, int64_t r1,
                                                       T* out) {
  csr_rows_isa<32, T>(ptr, col, a, lda, bt, ldb, len, r0, r1, out);
}
template <typename T>
void csr_rows_sse(const int32_t* ptr, const int32_t* col, const T* a, int64_t lda, const T* bt, int64_t ldb,
                  int64_t len, int64_t r0, int64_t r1, T* out) {
  csr_rows_isa<16, T>(ptr, col, a, lda, bt, ldb, len, r0, r1, out);
}
template <typename T>
__attribute__((target("avx2,fma"))) void positions_avx2(const int64_t* pos, int64_t n, const T* a, int64_t lda,
                                                        const T* bt, int64_t ldb, int64_t len, int64_t s0, int64_t s1,
                                                        T* out) {
  positions_isa<32, T>(pos, n, a, lda, bt, ldb, len, s0, s1, out);
}
template <typename T>
void positions_sse(const int64_t* pos, int64_t n, const T* a, int64_t lda, const T* bt, int64_t ldb, int64_t len,
                   int64_t s0, int64_t s1, T* out) {
  positions_isa<16, T>(pos, n, a, lda, bt, ldb, len, s0, s1, out);
}

// One pass over columns [j0, j0 + len): a's rows (lda apart) from column j0,
// and bt[:, j0 : j0 + len] packed [n, len] in `slice`.
template <typename T>
struct Pass {
  const T* a;
  int64_t lda;
  const T* slice;
  int64_t len, n;
  bool avx2;
};

// How each pattern format walks its stored values: over count() items (rows,
// or slots), split in chunks of grain(width) for `width` columns a pass, each
// chunk adding a[r, j0:] . bt[c, j0:] into the values it stores. One walk
// per format, so each format's SDDMM is its own kernel (registered below).

// CSR: row by row, four stored entries of a row per load of a's row.
class CsrRowsWalk {
 public:
  CsrRowsWalk(const Tensor& pattern, std::string_view op)
      : c_(csr_impl(pattern, op)),
        ptr_(c_.pointers().data<int32_t>()),
        col_(c_.indices().data<int32_t>()),
        rows_(pattern.size(0)) {}
  int64_t count() const { return rows_; }
  int64_t grain(int64_t width) const {
    const int64_t per_row = c_.nnz() / std::max<int64_t>(rows_, 1) + 1;
    return std::max<int64_t>(1, 65536 / (per_row * width + 1));
  }
  template <typename T>
  void run(const Pass<T>& p, int64_t r0, int64_t r1, T* out) const {
    if (p.avx2) {
      csr_rows_avx2<T>(ptr_, col_, p.a, p.lda, p.slice, p.len, p.len, r0, r1, out);
    } else {
      csr_rows_sse<T>(ptr_, col_, p.a, p.lda, p.slice, p.len, p.len, r0, r1, out);
    }
  }

 private:
  const CompressedImpl& c_;
  const int32_t* ptr_;
  const int32_t* col_;
  int64_t rows_;
};

// Any format: by stored position (zero where nothing is stored).
class PositionsWalk {
 public:
  PositionsWalk(const Tensor& pattern, std::string_view) : pos_(stored_positions(pattern)) {}
  int64_t count() const { return static_cast<int64_t>(pos_.size()); }
  int64_t grain(int64_t width) const { return std::max<int64_t>(1, 65536 / (width + 1)); }
  template <typename T>
  void run(const Pass<T>& p, int64_t s0, int64_t s1, T* out) const {
    if (p.avx2) {
      positions_avx2<T>(pos_.data(), p.n, p.a, p.lda, p.slice, p.len, p.len, s0, s1, out);
    } else {
      positions_sse<T>(pos_.data(), p.n, p.a, p.lda, p.slice, p.len, p.len, s0, s1, out);
    }
  }

 private:
  std::vector<int64_t> pos_;
};

template <typename Walk>
std::vector<Tensor> sddmm(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kSddmm;
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
  Tensor out = zeros(values(pattern).shape(), TensorOptions(acc, pattern.device()));
  const bool avx2 = use_avx2();
  dispatch_floating(acc, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pa = a.data<T>();
      const T* pb = bt.data<T>();
      T* po = out.data<T>();
      const int64_t lanes = 32 / static_cast<int64_t>(sizeof(T));
      const int64_t chunk = std::min(
          k,
          std::max(lanes, kSliceBytes / (std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T))) / lanes * lanes));
      std::vector<T> slice(static_cast<size_t>(n * std::min(chunk, k)));
      const Walk walk(pattern, op);
      const int64_t grain = walk.grain(std::min(k, chunk));
      for (int64_t j0 = 0; j0 < k; j0 += chunk) {
        const int64_t len = std::min(chunk, k - j0);
        cpu::parallel_for(0, n, 1024, [&](int64_t c0, int64_t c1) {
          pack_columns(pb + c0 * k + j0, k, c1 - c0, len, slice.data() + c0 * len);
        });
        const Pass<T> pass{pa + j0, k, slice.data(), len, n, avx2};
        cpu::parallel_for(0, walk.count(), grain, [&](int64_t i0, int64_t i1) { walk.run(pass, i0, i1, po); });
      }
    }
  });
  return {with_values(pattern, out.to(dtype))};
}

// Every format by stored position (the formats declared by their levels
// too, as a family); CSR's own kernel then takes its cell (a later
// registration replaces an earlier one).
const bool kRegistered = [] {
  for (const std::string& f : builtin_sparse_format_names()) {
    register_cpu(op::kSddmm, {{"dense", "dense", f}}, sddmm<PositionsWalk>);
  }
  register_cpu(op::kSddmm, {{"dense", "dense", std::string(kLevelFamily)}},
               levels::through_builtin_kernels(op::kSddmm, sddmm<PositionsWalk>));
  register_cpu(op::kSddmm, {{"dense", "dense", format_name(Layout::kCsr)}}, sddmm<CsrRowsWalk>);
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cpu
