#include "sparse/entry_remap.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/sparse_impl.h"
#include "sparse/stored_positions.h"
#include "tensor/checked_math.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

void check_axes(const Tensor& s, const EntryAxes& axes, std::string_view op) {
  COPPICE_CHECK(axes.input_axes >= 0 && axes.input_axes <= static_cast<int64_t>(axes.sizes.size()), op, ": ",
                axes.input_axes, " input axes of ", axes.sizes.size());
  int64_t in_numel = 1;
  for (size_t a = 0; a < axes.sizes.size(); ++a) {
    COPPICE_CHECK(axes.sizes[a] >= 0, op, ": axis ", a, " has a negative size ", axes.sizes[a]);
    if (static_cast<int64_t>(a) < axes.input_axes) in_numel = checked_mul(in_numel, axes.sizes[a], op);
  }
  COPPICE_CHECK(in_numel == s.numel(), op, ": the input axes hold ", in_numel, " elements, but the ", s.format(),
                " operand of shape ", shape_to_string(s.shape()), " holds ", s.numel());
  std::vector<int> seen(axes.sizes.size(), 0);
  for (const auto& dim : axes.out_dims) {
    for (int64_t a : dim) {
      COPPICE_CHECK(a >= 0 && a < static_cast<int64_t>(axes.sizes.size()), op, ": output axis id ", a,
                    " is not one of the ", axes.sizes.size(), " axes");
      ++seen[a];
    }
  }
  for (int64_t a = 0; a < axes.input_axes; ++a)
    COPPICE_CHECK(seen[a] > 0, op, ": input axis ", a, " does not appear in the output (sum it out instead)");
}

}  // namespace

RemappedPattern remap_stored_entries(const Tensor& s, const EntryAxes& axes, std::string_view format,
                                     std::string_view op) {
  COPPICE_CHECK(s.defined() && s.is_sparse(), op, ": expected a sparse operand");
  COPPICE_CHECK(format == "coo" || format == "csr", op, ": remapped entries are COO or CSR, not '", format, "'");
  check_axes(s, axes, op);
  const size_t n_axes = axes.sizes.size();
  const auto n_in = static_cast<size_t>(axes.input_axes);

  Shape out_shape;
  for (const auto& dim : axes.out_dims) {
    int64_t size = 1;
    for (int64_t a : dim) size = checked_mul(size, axes.sizes[a], op);
    out_shape.push_back(size);
  }
  int64_t out_numel = 1;
  for (int64_t d : out_shape) out_numel = checked_mul(out_numel, d, op);
  COPPICE_CHECK(format == "coo" || out_shape.size() == 2, op, ": a CSR result needs 2 dims, got ",
                shape_to_string(out_shape));

  // Every new axis repeats each entry; their combinations, row-major.
  int64_t repeats = 1;
  for (size_t a = n_in; a < n_axes; ++a) repeats = checked_mul(repeats, axes.sizes[a], op);

  // (output flat position, element of values(s)) for every stored entry
  // and repeat.
  const std::vector<int64_t> positions = stored_positions(s);
  std::vector<std::pair<int64_t, int64_t>> entries;
  entries.reserve(positions.size() * static_cast<size_t>(std::max<int64_t>(repeats, 0)));
  std::vector<int64_t> coord(n_axes);
  for (size_t e = 0; e < positions.size(); ++e) {
    int64_t p = positions[e];
    if (p < 0) continue;  // padding
    for (size_t a = n_in; a-- > 0;) {
      coord[a] = p % axes.sizes[a];
      p /= axes.sizes[a];
    }
    for (int64_t r = 0; r < repeats; ++r) {
      int64_t q = r;
      for (size_t a = n_axes; a-- > n_in;) {
        coord[a] = q % axes.sizes[a];
        q /= axes.sizes[a];
      }
      int64_t flat = 0;
      for (size_t d = 0; d < axes.out_dims.size(); ++d) {
        int64_t c = 0;
        for (int64_t a : axes.out_dims[d]) c = c * axes.sizes[a] + coord[a];
        flat = flat * out_shape[d] + c;
      }
      entries.emplace_back(flat, static_cast<int64_t>(e));
    }
  }
  std::sort(entries.begin(), entries.end());
  for (size_t k = 1; k < entries.size(); ++k) {
    COPPICE_CHECK(entries[k].first != entries[k - 1].first, op, ": the ", s.format(),
                  " operand stores a position twice (elements ", entries[k - 1].second, " and ", entries[k].second,
                  " of its values); coalesce() it first");
  }

  const auto nnz = static_cast<int64_t>(entries.size());
  const auto ndim = static_cast<int64_t>(out_shape.size());
  std::vector<int64_t> take(entries.size());
  std::vector<int64_t> coords(static_cast<size_t>(ndim * nnz));
  for (int64_t k = 0; k < nnz; ++k) {
    take[k] = entries[k].second;
    int64_t flat = entries[k].first;
    for (int64_t d = ndim; d-- > 0;) {
      coords[static_cast<size_t>(d * nnz + k)] = flat % out_shape[d];
      flat /= out_shape[d];
    }
  }
  const Device device = s.device();
  Tensor values = zeros({nnz}, TensorOptions(s.dtype(), device));
  RemappedPattern out;
  out.take = from_vector(take, {nnz}).to(device);
  if (format == "coo") {
    out.pattern = sparse_coo(from_vector(coords, {ndim, nnz}).to(device), values, out_shape, /*coalesced=*/true);
    return out;
  }
  COPPICE_CHECK(out_shape[1] <= std::numeric_limits<int32_t>::max(), op, ": a CSR of ", out_shape[1],
                " columns does not fit 32-bit column indices");
  std::vector<int64_t> crow(static_cast<size_t>(out_shape[0] + 1), 0);
  for (int64_t k = 0; k < nnz; ++k) ++crow[static_cast<size_t>(coords[k] + 1)];
  std::partial_sum(crow.begin(), crow.end(), crow.begin());
  std::vector<int64_t> cols(coords.begin() + nnz, coords.end());
  out.pattern = sparse_csr(from_vector(crow, {out_shape[0] + 1}).to(device), from_vector(cols, {nnz}).to(device),
                           values, out_shape);
  return out;
}

Tensor entry_take(const Tensor& target, const std::vector<int64_t>& source_positions, std::string_view op) {
  std::unordered_map<int64_t, int64_t> at;
  at.reserve(source_positions.size() * 2);
  for (size_t k = 0; k < source_positions.size(); ++k) {
    const int64_t p = source_positions[k];
    if (p < 0) continue;
    COPPICE_CHECK(at.emplace(p, static_cast<int64_t>(k)).second, op, ": flat position ", p,
                  " is stored twice among the sources (an uncoalesced COO: coalesce() it first)");
  }
  const std::vector<int64_t> positions = stored_positions(target);
  std::vector<int64_t> take(positions.size(), static_cast<int64_t>(source_positions.size()));
  for (size_t e = 0; e < positions.size(); ++e) {
    if (positions[e] < 0) continue;
    auto it = at.find(positions[e]);
    if (it != at.end()) take[e] = it->second;
  }
  return from_vector(take, {static_cast<int64_t>(take.size())}).to(target.device());
}

RemappedPattern select_rows(const Tensor& s, const std::vector<int64_t>& rows, std::string_view op) {
  COPPICE_CHECK(s.defined() && s.is_sparse() && s.dim() == 2, op, ": expected a 2-D sparse tensor");
  const int64_t n_rows = s.size(0), n_cols = s.size(1);
  COPPICE_CHECK(n_cols <= std::numeric_limits<int32_t>::max(), op, ": ", n_cols,
                " columns do not fit 32-bit column indices");
  // Each row's entries, by column: (column, element of values(s)).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> by_row(static_cast<size_t>(n_rows));
  const std::vector<int64_t> positions = stored_positions(s);
  for (size_t e = 0; e < positions.size(); ++e) {
    if (positions[e] < 0) continue;
    by_row[positions[e] / n_cols].emplace_back(positions[e] % n_cols, static_cast<int64_t>(e));
  }
  for (auto& r : by_row) std::sort(r.begin(), r.end());
  std::vector<int64_t> crow{0}, cols, take;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    COPPICE_CHECK(r >= 0 && r < n_rows, op, ": index ", r, " at position ", i, " is outside [0, ", n_rows, ")");
    for (const auto& [c, e] : by_row[r]) {
      cols.push_back(c);
      take.push_back(e);
    }
    crow.push_back(static_cast<int64_t>(cols.size()));
  }
  const Device device = s.device();
  const auto n = static_cast<int64_t>(rows.size()), nnz = static_cast<int64_t>(cols.size());
  RemappedPattern out;
  out.take = from_vector(take, {nnz}).to(device);
  out.pattern = sparse_csr(from_vector(crow, {n + 1}).to(device), from_vector(cols, {nnz}).to(device),
                           zeros({nnz}, TensorOptions(s.dtype(), device)), {n, n_cols});
  return out;
}

}  // namespace coppice
