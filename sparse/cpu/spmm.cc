// SpMM on the CPU: "matmul" with one sparse and one dense operand, and
// "linear" (x @ weight^T) with a sparse weight or a sparse input, for every
// format of sparse/ (sparse/ops.h has the table).
//
// Each format is viewed as the rows of a matrix M (spmm_kernels.h): CSR,
// COO (coalesced), BSR, Blocked-ELL and n:m as M = A, CSC as M = A^T over
// the very same arrays, so no product materializes a transpose of the sparse
// operand. Masked dense is dense compute by design: its kernels run the dense
// product on where(mask, values, 0). The formats declared by their levels
// share one generic view, by stored positions. bf16/f16 operands are
// computed in f32 and rounded once.
#include <algorithm>
#include <utility>
#include <vector>

#include "sparse/convert.h"
#include "sparse/cpu/spmm_kernels.h"
#include "sparse/cpu/util.h"
#include "sparse/formats.h"
#include "sparse/levels/level_routes.h"
#include "sparse/nm_metadata.h"
#include "sparse/stored_positions.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparse_cpu {
namespace {

struct BsrLayout {
  const int32_t* crow;
  const int32_t* bcol_;
  int64_t block_numel, bw;
  int64_t block_begin(int64_t br) const { return crow[br]; }
  int64_t block_end(int64_t br) const { return crow[br + 1]; }
  int64_t bcol(int64_t k) const { return bcol_[k]; }
  int64_t offset(int64_t k, int64_t i) const { return k * block_numel + i * bw; }
};

// Block row br stores its valid blocks first (then -1 padding): slots
// [br * ell_cols, br * ell_cols + valid[br]) of the ell_col_indices array.
struct EllLayout {
  const int32_t* ell;
  const int64_t* valid;
  int64_t ell_cols, b;
  int64_t block_begin(int64_t br) const { return br * ell_cols; }
  int64_t block_end(int64_t br) const { return br * ell_cols + valid[br]; }
  int64_t bcol(int64_t k) const { return ell[k]; }
  int64_t offset(int64_t k, int64_t i) const {
    const int64_t br = k / ell_cols, j = k % ell_cols;
    return ((br * b + i) * ell_cols + j) * b;
  }
};

// Whether an n:m operand is 2:4 with cols a multiple of 16 (one metadata
// word per 16 columns).
bool reads_hardware_form(const Tensor& a, std::string_view op) {
  const NmImpl& s = nm_impl(a, op);
  return s.n() == 2 && s.m() == 4 && a.dim() == 2 && a.size(1) % 16 == 0;
}

// The row view of each format: View::with<T>(a, vals, op, fn) calls fn(M,
// a_is_transposed) with M the rows of sparse `a` (values as T, already
// converted): M = A, or M = A^T for CSC. One view per format, so each
// format's products are their own kernels (registered below, by format).

// CSR, and CSC as the CSR of A^T over the same arrays.
struct CompressedView {
  static Tensor prepare(const Tensor& a) { return a; }
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view op, const Fn& fn) {
    const int64_t rows = a.size(0), cols = a.size(1);
    const CompressedImpl& c = csr_impl(a, op);
    const int32_t* ptr = c.pointers().data<int32_t>();
    const int32_t* idx = c.indices().data<int32_t>();
    const bool csr = c.is_csr();
    CompressedRows<T, int32_t, int32_t> m{ptr, ptr + 1, idx, vals.data<T>(), csr ? rows : cols, csr ? cols : rows};
    fn(m, !csr);
  }
};

// Coalesced COO is CSR with explicit row indices: rows counted for pointers.
struct CooView {
  static Tensor prepare(const Tensor& a) { return coalesce(a); }  // sums duplicates
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view op, const Fn& fn) {
    const int64_t rows = a.size(0), cols = a.size(1);
    const CooImpl& c = coo_impl(a, op);
    COPPICE_CHECK(c.is_coalesced(), op, ": internal: COO operand not coalesced");
    const int64_t nnz = c.nnz();
    const int64_t* idx = c.indices().data<int64_t>();
    std::vector<int64_t> ptr(static_cast<size_t>(rows + 1), 0);
    for (int64_t e = 0; e < nnz; ++e) ++ptr[static_cast<size_t>(idx[e] + 1)];
    for (int64_t r = 0; r < rows; ++r) ptr[static_cast<size_t>(r + 1)] += ptr[static_cast<size_t>(r)];
    CompressedRows<T, int64_t, int64_t> m{ptr.data(), ptr.data() + 1, idx + nnz, vals.data<T>(), rows, cols};
    fn(m, false);
  }
};

// n:m as CSR with n * groups entries a row. 2:4 whose rows hold whole
// metadata words reads its columns from the hardware form (pack_nm24, then
// the words decoded): the CPU twin of what the sparse tensor-core kernels
// read (sparse/cuda/nm24_mma.h).
struct NmView {
  static Tensor prepare(const Tensor& a) { return a; }
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view op, const Fn& fn) {
    const int64_t rows = a.size(0), cols = a.size(1);
    const NmImpl& s = nm_impl(a, op);
    const int64_t n = s.n(), mm = s.m(), per_row = s.groups_per_row() * n;
    std::vector<int64_t> ptr(static_cast<size_t>(rows + 1));
    for (int64_t r = 0; r <= rows; ++r) ptr[static_cast<size_t>(r)] = r * per_row;
    std::vector<int32_t> col;
    if (reads_hardware_form(a, op)) {
      // The columns decoded from the metadata words (not a 2:4 tensor built
      // from them: its checks cost 15x the product of one row).
      col = nm24_columns(pack_nm24(a).metadata, a.shape());
    } else {
      col.resize(static_cast<size_t>(rows * per_row));
      const uint8_t* pos = s.indices().data<uint8_t>();
      cpu::parallel_for(0, rows, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t q = 0; q < per_row; ++q) {
            const int64_t slot = r * per_row + q;
            col[static_cast<size_t>(slot)] = static_cast<int32_t>((q / n) * mm + pos[slot]);
          }
        }
      });
    }
    CompressedRows<T, int32_t, int64_t> m{ptr.data(), ptr.data() + 1, col.data(), vals.data<T>(), rows, cols};
    fn(m, false);
  }
};

struct BsrView {
  static Tensor prepare(const Tensor& a) { return a; }
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view op, const Fn& fn) {
    const BsrImpl& b = bsr_impl(a, op);
    const int64_t bh = b.block_rows(), bw = b.block_cols();
    BsrLayout layout{b.crow_indices().data<int32_t>(), b.col_indices().data<int32_t>(), bh * bw, bw};
    BlockRows<T, BsrLayout> m{layout, vals.data<T>(), a.size(0), a.size(1), bh, bw};
    fn(m, false);
  }
};

struct BlockedEllView {
  static Tensor prepare(const Tensor& a) { return a; }
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view op, const Fn& fn) {
    const BlockedEllImpl& b = blocked_ell_impl(a, op);
    const int64_t bs = b.block_size(), ec = b.ell_cols(), nbr = a.size(0) / bs;
    const int32_t* ell = b.ell_col_indices().data<int32_t>();
    std::vector<int64_t> valid(static_cast<size_t>(nbr), 0);
    for (int64_t br = 0; br < nbr; ++br) {
      int64_t j = 0;
      while (j < ec && ell[br * ec + j] >= 0) ++j;
      valid[static_cast<size_t>(br)] = j;
    }
    EllLayout layout{ell, valid.data(), ec, bs};
    BlockRows<T, EllLayout> m{layout, vals.data<T>(), a.size(0), a.size(1), bs, bs};
    fn(m, false);
  }
};

// Any format by its stored positions (sparse/stored_positions.h): the
// entries sorted into rows (a repeated position's entries side by side, so
// they add), values gathered in that order. The generic product of the
// formats declared by their levels (kLevelFamily).
struct PositionsView {
  static Tensor prepare(const Tensor& a) { return a; }
  template <typename T, typename Fn>
  static void with(const Tensor& a, const Tensor& vals, std::string_view, const Fn& fn) {
    const int64_t rows = a.size(0), cols = a.size(1);
    const std::vector<int64_t> pos = stored_positions(a);
    std::vector<std::pair<int64_t, int64_t>> entries;  // (position, slot)
    entries.reserve(pos.size());
    for (size_t s = 0; s < pos.size(); ++s) {
      if (pos[s] >= 0) entries.emplace_back(pos[s], static_cast<int64_t>(s));
    }
    std::sort(entries.begin(), entries.end());
    std::vector<int64_t> ptr(static_cast<size_t>(rows + 1), 0), col(entries.size());
    std::vector<T> v(entries.size());
    const T* pv = vals.data<T>();
    for (size_t i = 0; i < entries.size(); ++i) {
      ++ptr[static_cast<size_t>(entries[i].first / cols + 1)];
      col[i] = entries[i].first % cols;
      v[i] = pv[entries[i].second];
    }
    for (int64_t r = 0; r < rows; ++r) ptr[static_cast<size_t>(r + 1)] += ptr[static_cast<size_t>(r)];
    CompressedRows<T, int64_t, int64_t> m{ptr.data(), ptr.data() + 1, col.data(), v.data(), rows, cols};
    fn(m, false);
  }
};

enum class Product { kSparseDense, kDenseSparse, kDenseSparseT };

// kSparseDense: A @ X. kDenseSparse: X @ A. kDenseSparseT: X @ A^T (linear).
template <typename View>
Tensor spmm(const Tensor& a_in, const Tensor& x_in, Product product, std::string_view op) {
  const Tensor a = View::prepare(a_in);
  const DType dtype = a.dtype(), acc = accumulate_dtype(dtype);
  const Tensor x = contiguous_as(x_in, acc);
  const Tensor vals = contiguous_as(values(a), acc);
  const int64_t ar = a.size(0), ac = a.size(1);
  Shape out_shape;
  if (product == Product::kSparseDense) {
    COPPICE_CHECK(x.size(0) == ac, op, ": inner dimensions differ: sparse a is ", shape_to_string(a.shape()),
                  ", dense b is ", shape_to_string(x.shape()));
    out_shape = {ar, x.size(1)};
  } else {
    const int64_t k = product == Product::kDenseSparse ? ar : ac;
    COPPICE_CHECK(x.size(1) == k, op, ": inner dimensions differ: dense ", shape_to_string(x.shape()), " and sparse ",
                  shape_to_string(a.shape()), product == Product::kDenseSparseT ? " (transposed)" : "");
    out_shape = {x.size(0), product == Product::kDenseSparse ? ac : ar};
  }
  Tensor out = Tensor::empty(out_shape, TensorOptions(acc, a.device()));
  dispatch_floating(acc, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      View::template with<T>(a, vals, op, [&](const auto& m, bool a_is_mt) {
        const T* px = x.data<T>();
        T* po = out.data<T>();
        const int64_t n = out_shape[1];
        switch (product) {
          case Product::kSparseDense:
            if (a_is_mt) {
              spmm_scatter<T>(m, px, x.size(1), po, n, n);
            } else {
              spmm_gather<T>(m, px, x.size(1), po, n, n);
            }
            break;
          case Product::kDenseSparse:  // X @ A: X @ M, or X @ M^T when M = A^T
            dense_spmm<T>(px, x.size(1), x.size(0), m, a_is_mt, po, n);
            break;
          case Product::kDenseSparseT:  // X @ A^T
            dense_spmm<T>(px, x.size(1), x.size(0), m, !a_is_mt, po, n);
            break;
        }
      });
    }
  });
  return out.to(dtype);
}

void check_spmm_inputs(const std::vector<Tensor>& in, std::string_view op) {
  check_inputs(in, 2, op);
  check_matrix(in[0], op, "a");
  check_matrix(in[1], op, "b");
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.device().is_cpu(), op, ": CPU kernel got an operand on ", t.device().to_string());
  }
}

template <typename View>
std::vector<Tensor> matmul_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_spmm_inputs(in, op::kMatmul);
  return {spmm<View>(in[0], in[1], Product::kSparseDense, op::kMatmul)};
}

template <typename View>
std::vector<Tensor> matmul_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_spmm_inputs(in, op::kMatmul);
  return {spmm<View>(in[1], in[0], Product::kDenseSparse, op::kMatmul)};
}

// linear(x, weight) = x @ weight^T (the frontend adds the bias).
template <typename View>
std::vector<Tensor> linear_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_spmm_inputs(in, op::kLinear);
  return {spmm<View>(in[1], in[0], Product::kDenseSparseT, op::kLinear)};
}

template <typename View>
std::vector<Tensor> linear_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_spmm_inputs(in, op::kLinear);
  return {spmm<View>(in[0], in[1].t(), Product::kSparseDense, op::kLinear)};
}

template <typename View>
void register_products(const std::string& format) {
  register_cpu(op::kMatmul, {{format, "dense"}}, matmul_sparse_dense<View>);
  register_cpu(op::kMatmul, {{"dense", format}}, matmul_dense_sparse<View>);
  register_cpu(op::kLinear, {{"dense", format}}, linear_dense_sparse<View>);
  register_cpu(op::kLinear, {{format, "dense"}}, linear_sparse_dense<View>);
}

// Masked dense computes densely: the dense product of where(mask, values, 0).
void register_masked_products() {
  const std::string& masked = format_name(Layout::kMasked);
  register_cpu(op::kMatmul, {{masked, "dense"}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_spmm_inputs(in, op::kMatmul);
    return std::vector<Tensor>{matmul(to_dense(in[0]), in[1])};
  });
  register_cpu(op::kMatmul, {{"dense", masked}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_spmm_inputs(in, op::kMatmul);
    return std::vector<Tensor>{matmul(in[0], to_dense(in[1]))};
  });
  register_cpu(op::kLinear, {{"dense", masked}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_spmm_inputs(in, op::kLinear);
    return std::vector<Tensor>{linear(in[0], to_dense(in[1]))};
  });
  register_cpu(op::kLinear, {{masked, "dense"}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_spmm_inputs(in, op::kLinear);
    return std::vector<Tensor>{linear(to_dense(in[0]), in[1])};
  });
}

const bool kRegistered = [] {
  register_products<CompressedView>(format_name(Layout::kCsr));
  register_products<CompressedView>(format_name(Layout::kCsc));
  register_products<CooView>(format_name(Layout::kCoo));
  register_products<NmView>(format_name(Layout::kNm));
  register_products<BsrView>(format_name(Layout::kBsr));
  register_products<BlockedEllView>(format_name(Layout::kBlockedEll));
  register_masked_products();
  // The level family: a built-in format's kernel where the declaration is one's, else the generic view.
  const std::string levels(kLevelFamily);
  register_cpu(op::kMatmul, {{levels, "dense"}},
               levels::through_builtin_kernels(op::kMatmul, matmul_sparse_dense<PositionsView>));
  register_cpu(op::kMatmul, {{"dense", levels}},
               levels::through_builtin_kernels(op::kMatmul, matmul_dense_sparse<PositionsView>));
  register_cpu(op::kLinear, {{"dense", levels}},
               levels::through_builtin_kernels(op::kLinear, linear_dense_sparse<PositionsView>));
  register_cpu(op::kLinear, {{levels, "dense"}},
               levels::through_builtin_kernels(op::kLinear, linear_sparse_dense<PositionsView>));
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cpu
