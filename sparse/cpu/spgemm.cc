// Sparse x sparse on the CPU, CSR in and out: SpGEMM ("matmul" with two CSR
// operands) and the union of two patterns ("add" and "sub" with two CSR
// operands). Both run two passes over row chunks in parallel: count each
// output row, then fill it. Entries that cancel to zero stay stored (the
// pattern is structural). bf16/f16 accumulate in f32.
#include <algorithm>
#include <vector>

#include "sparse/cpu/parallel_rows.h"
#include "sparse/cpu/util.h"
#include "sparse/csr.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparse_cpu {
namespace {

// A CSR built from host arrays filled by the two passes.
Tensor make_csr(std::vector<int32_t> crow, std::vector<int32_t> col, const Tensor& vals, const Shape& shape) {
  const int64_t rows = static_cast<int64_t>(crow.size()) - 1, nnz = static_cast<int64_t>(col.size());
  Tensor p = Tensor::empty({rows + 1}, DType::kI32), c = Tensor::empty({nnz}, DType::kI32);
  std::copy(crow.begin(), crow.end(), p.data<int32_t>());
  std::copy(col.begin(), col.end(), c.data<int32_t>());
  return Tensor(std::make_shared<CompressedImpl>(Layout::kCsr, p, c, vals, shape, new_pattern_version()));
}

// One CSR operand as the passes read it: its index arrays on the host and
// its values in the accumulation dtype.
struct HostCsr {
  const int32_t* ptr;
  const int32_t* idx;
  Tensor values;
};

HostCsr host_csr(const Tensor& t, DType acc, std::string_view op) {
  const CompressedImpl& c = csr_impl(t, op);
  return {c.pointers().data<int32_t>(), c.indices().data<int32_t>(), contiguous_as(c.values(), acc)};
}

void check_csr_pair(const std::vector<Tensor>& in, std::string_view op) {
  check_inputs(in, 2, op);
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.device().is_cpu(), op, ": CPU kernel got an operand on ", t.device().to_string());
  }
}

// C = A @ B (Gustavson): row r of C accumulates rows of B in a dense row.
std::vector<Tensor> spgemm(const std::vector<Tensor>& in, const Attrs&) {
  constexpr std::string_view op = op::kMatmul;
  check_csr_pair(in, op);
  const int64_t m = in[0].size(0), k = in[0].size(1), n = in[1].size(1);
  COPPICE_CHECK(in[1].size(0) == k, op, ": inner dimensions differ: a is ", shape_to_string(in[0].shape()), ", b is ",
                shape_to_string(in[1].shape()));
  const DType dtype = in[0].dtype(), acc = accumulate_dtype(dtype);
  const HostCsr a = host_csr(in[0], acc, op), b = host_csr(in[1], acc, op);
  const int32_t *ap = a.ptr, *ai = a.idx, *bp = b.ptr, *bi = b.idx;
  std::vector<int32_t> crow(static_cast<size_t>(m + 1), 0);
  std::vector<int32_t> col;
  Tensor vals;
  dispatch_floating(acc, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pav = a.values.data<T>();
      const T* pbv = b.values.data<T>();
      RowPasses passes(m);
      passes.count([&](int64_t r0, int64_t r1, std::vector<int64_t>& counts) {
        std::vector<int64_t> mark(static_cast<size_t>(n), -1);
        for (int64_t r = r0; r < r1; ++r) {
          int64_t c = 0;
          for (int64_t e = ap[r]; e < ap[r + 1]; ++e) {
            const int64_t j = ai[e];
            for (int64_t f = bp[j]; f < bp[j + 1]; ++f) {
              if (mark[static_cast<size_t>(bi[f])] != r) {
                mark[static_cast<size_t>(bi[f])] = r;
                ++c;
              }
            }
          }
          counts[static_cast<size_t>(r)] = c;
        }
      });
      const int64_t nnz = passes.offsets(&crow, op);
      col.resize(static_cast<size_t>(nnz));
      vals = Tensor::empty({nnz}, TensorOptions(acc));
      T* pv = vals.data<T>();
      passes.fill([&](int64_t r0, int64_t r1) {
        std::vector<T> row(static_cast<size_t>(n), T(0));
        std::vector<int64_t> mark(static_cast<size_t>(n), -1);
        std::vector<int32_t> touched;
        for (int64_t r = r0; r < r1; ++r) {
          touched.clear();
          for (int64_t e = ap[r]; e < ap[r + 1]; ++e) {
            const int64_t j = ai[e];
            const T x = pav[e];
            for (int64_t f = bp[j]; f < bp[j + 1]; ++f) {
              const int32_t c = bi[f];
              if (mark[static_cast<size_t>(c)] != r) {
                mark[static_cast<size_t>(c)] = r;
                touched.push_back(c);
              }
              row[static_cast<size_t>(c)] += x * pbv[f];
            }
          }
          std::sort(touched.begin(), touched.end());
          int64_t out = crow[static_cast<size_t>(r)];
          for (int32_t c : touched) {
            col[static_cast<size_t>(out)] = c;
            pv[out++] = row[static_cast<size_t>(c)];
            row[static_cast<size_t>(c)] = T(0);
          }
        }
      });
    }
  });
  return {make_csr(std::move(crow), std::move(col), vals.to(dtype), {m, n})};
}

// C = A + sign * B over the union of both patterns (a merge of sorted rows).
std::vector<Tensor> union_op(const std::vector<Tensor>& in, double sign, std::string_view op) {
  check_csr_pair(in, op);
  COPPICE_CHECK(in[0].shape() == in[1].shape(), op, ": sparse operands must have one shape (no broadcasting), got ",
                shape_to_string(in[0].shape()), " and ", shape_to_string(in[1].shape()));
  // One pattern (the same version): the values alone change.
  if (pattern_version(in[0]) == pattern_version(in[1])) {
    return {with_values(in[0], sign > 0 ? add(values(in[0]), values(in[1])) : sub(values(in[0]), values(in[1])))};
  }
  const int64_t m = in[0].size(0);
  const DType dtype = in[0].dtype(), acc = accumulate_dtype(dtype);
  const HostCsr a = host_csr(in[0], acc, op), b = host_csr(in[1], acc, op);
  const int32_t *ap = a.ptr, *ai = a.idx, *bp = b.ptr, *bi = b.idx;
  std::vector<int32_t> crow(static_cast<size_t>(m + 1), 0);
  std::vector<int32_t> col;
  Tensor vals;
  dispatch_floating(acc, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pav = a.values.data<T>();
      const T* pbv = b.values.data<T>();
      const T s = static_cast<T>(sign);
      // Walks the merge of row r, calling emit(col, value).
      auto merge = [&](int64_t r, auto&& emit) {
        int64_t e = ap[r], f = bp[r];
        const int64_t e1 = ap[r + 1], f1 = bp[r + 1];
        while (e < e1 || f < f1) {
          if (f == f1 || (e < e1 && ai[e] < bi[f])) {
            emit(ai[e], pav[e]);
            ++e;
          } else if (e == e1 || bi[f] < ai[e]) {
            emit(bi[f], s * pbv[f]);
            ++f;
          } else {
            emit(ai[e], pav[e] + s * pbv[f]);
            ++e;
            ++f;
          }
        }
      };
      RowPasses passes(m);
      passes.count([&](int64_t r0, int64_t r1, std::vector<int64_t>& counts) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t c = 0;
          merge(r, [&](int32_t, T) { ++c; });
          counts[static_cast<size_t>(r)] = c;
        }
      });
      const int64_t nnz = passes.offsets(&crow, op);
      col.resize(static_cast<size_t>(nnz));
      vals = Tensor::empty({nnz}, TensorOptions(acc));
      T* pv = vals.data<T>();
      passes.fill([&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t out = crow[static_cast<size_t>(r)];
          merge(r, [&](int32_t c, T v) {
            col[static_cast<size_t>(out)] = c;
            pv[out++] = v;
          });
        }
      });
    }
  });
  return {make_csr(std::move(crow), std::move(col), vals.to(dtype), in[0].shape())};
}

const bool kRegistered = [] {
  register_cpu(op::kMatmul, {{"csr", "csr"}}, spgemm);
  using binary_ops::Add;
  using binary_ops::Sub;
  register_cpu(Add::kName, {{"csr", "csr"}},
               [](const std::vector<Tensor>& in, const Attrs&) { return union_op(in, 1.0, Add::kName); });
  register_cpu(Sub::kName, {{"csr", "csr"}},
               [](const std::vector<Tensor>& in, const Attrs&) { return union_op(in, -1.0, Sub::kName); });
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cpu
