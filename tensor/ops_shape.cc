// Joining and indexing: cat, stack, index_select, gather, scatter_add, index_copy_.
//
// The kernels check every index against its range (kernels.h), so a bad index
// is an error naming the op on every device, without a copy to the host here.
#include "tensor/backend.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// Every tensor dense, with one dtype and device (those of the first).
void check_list(const std::vector<Tensor>& tensors, std::string_view op) {
  COPPICE_CHECK(!tensors.empty(), op, ": expected at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_dense(tensors[i], op, str_cat("tensor ", i));
    const Tensor& t = tensors[i];
    COPPICE_CHECK(t.dtype() == tensors[0].dtype(), op, ": tensor ", i, " has dtype ", dtype_name(t.dtype()),
                  ", expected ", dtype_name(tensors[0].dtype()), " like tensor 0");
    COPPICE_CHECK(t.device() == tensors[0].device(), op, ": tensor ", i, " is on ", t.device().to_string(),
                  ", expected ", tensors[0].device().to_string(), " like tensor 0");
  }
}

bool all_contiguous(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (!t.is_contiguous()) return false;
  }
  return true;
}

void run_piece_copy(const PieceCopy& copy, Device device) {
  if (device.is_cpu()) {
    copy_pieces_on_host(copy);
  } else {
    backend_for(device).copy_pieces(device.index, copy);
  }
}

// cat of contiguous tensors along dim d into `out`: each tensor is rows of
// size(d) * inner elements (rows: the product of the sizes before d), which
// land side by side in out's rows. One launch on a GPU for all of them
// (PieceCopy), where a copy per tensor would launch each.
void copy_rows_into(const Tensor& out, const std::vector<Tensor>& tensors, int64_t d) {
  const int64_t esize = static_cast<int64_t>(dtype_size(out.dtype()));
  int64_t rows = 1;
  for (int64_t k = 0; k < d; ++k) rows *= out.size(k);
  if (rows == 0 || out.numel() == 0) return;
  PieceCopy copy;
  copy.dst = out.data_ptr();
  copy.rows = rows;
  copy.dst_row_bytes = out.numel() / rows * esize;
  int64_t col = 0;
  for (const Tensor& t : tensors) {
    const int64_t row_bytes = t.numel() / rows * esize;
    copy.src.push_back(t.data_ptr());
    copy.row_bytes.push_back(row_bytes);
    copy.col_bytes.push_back(col);
    col += row_bytes;
  }
  run_piece_copy(copy, out.device());
}

// The index as a contiguous i64 tensor. Its values are range-checked by the
// kernels (kernels.h), which throw naming the op before writing anything.
Tensor as_index(const Tensor& index, std::string_view op) {
  COPPICE_CHECK(is_integral(index.dtype()), op, ": index must be an integer tensor, got ", dtype_name(index.dtype()));
  return index.to(DType::kI64).contiguous();
}

void check_indexing(const Tensor& x, const Tensor& index, std::string_view op) {
  check_dense(x, op, "input");
  check_dense(index, op, "index");
  check_same_device({x, index}, op);
  COPPICE_CHECK(x.dim() >= 1, op, ": input must be at least 1-D, got a 0-D tensor");
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  check_list(tensors, "cat");
  const Tensor& first = tensors[0];
  COPPICE_CHECK(first.dim() > 0, "cat: zero-dimensional tensors cannot be concatenated");
  int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool same = t.dim() == first.dim();
    for (int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.size(k) == first.size(k);
    COPPICE_CHECK(same, "cat: tensor ", i, " has shape ", shape_to_string(t.shape()), ", expected ",
                  shape_to_string(first.shape()), " like tensor 0 except in dim ", d);
    out_shape[d] += t.size(d);
  }
  Tensor out = empty(out_shape, first.options());
  if (all_contiguous(tensors)) {
    copy_rows_into(out, tensors, d);
    return out;
  }
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) out.narrow(d, offset, t.size(d)).copy_(t);
    offset += t.size(d);
  }
  return out;
}

void copy_into_at(const Tensor& out, const std::vector<Tensor>& pieces, const std::vector<int64_t>& offsets) {
  constexpr std::string_view op = "copy_into_at";
  check_dense(out, op, "out");
  COPPICE_CHECK(out.is_contiguous(), op, ": out must be contiguous");
  COPPICE_CHECK(!out.storage().read_only(), op, ": out is read-only memory");
  COPPICE_CHECK(pieces.size() == offsets.size(), op, ": ", pieces.size(), " pieces but ", offsets.size(), " offsets");
  const int64_t esize = static_cast<int64_t>(dtype_size(out.dtype()));
  PieceCopy copy;
  copy.dst = out.data_ptr();
  copy.dst_row_bytes = out.numel() * esize;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor& t = pieces[i];
    check_dense(t, op, str_cat("piece ", i));
    COPPICE_CHECK(t.is_contiguous(), op, ": piece ", i, " is not contiguous");
    COPPICE_CHECK(t.dtype() == out.dtype() && t.device() == out.device(), op, ": piece ", i, " is ",
                  dtype_name(t.dtype()), " on ", t.device().to_string(), ", expected ", dtype_name(out.dtype()), " on ",
                  out.device().to_string(), " like out");
    COPPICE_CHECK(offsets[i] >= 0 && offsets[i] + t.numel() <= out.numel(), op, ": piece ", i, " (", t.numel(),
                  " elements at offset ", offsets[i], ") does not fit out's ", out.numel());
    if (t.numel() == 0) continue;
    copy.src.push_back(t.data_ptr());
    copy.row_bytes.push_back(t.numel() * esize);
    copy.col_bytes.push_back(offsets[i] * esize);
  }
  if (copy.src.empty()) return;
  run_piece_copy(copy, out.device());
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  check_list(tensors, "stack");
  int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    COPPICE_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
                  shape_to_string(tensors[i].shape()), ", expected ", shape_to_string(tensors[0].shape()),
                  " like tensor 0");
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

namespace {

Tensor index_select_with(const Tensor& x, int64_t dim, const Tensor& index, bool trusted) {
  check_indexing(x, index, op::kIndexSelect);
  int64_t d = normalize_dim(dim, x.dim(), op::kIndexSelect);
  COPPICE_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got ", shape_to_string(index.shape()));
  Tensor idx = as_index(index, op::kIndexSelect).reshape({-1});
  Shape out_shape = x.shape();
  out_shape[d] = idx.numel();
  if (shape_numel(out_shape) == 0) return empty(out_shape, x.options());
  return dispatch(op::kIndexSelect, {x.contiguous(), idx}, Attrs().set("dim", d).set("trusted", trusted))[0];
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return index_select_with(x, dim, index, false);
}

Tensor index_select_trusted(const Tensor& x, int64_t dim, const Tensor& index) {
  return index_select_with(x, dim, index, true);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_indexing(x, index, op::kGather);
  int64_t d = normalize_dim(dim, x.dim(), op::kGather);
  COPPICE_CHECK(index.dim() == x.dim(), "gather: index must have as many dims as the input (", x.dim(), "), got ",
                shape_to_string(index.shape()));
  for (int64_t k = 0; k < x.dim(); ++k) {
    COPPICE_CHECK(k == d || index.size(k) <= x.size(k), "gather: index ", shape_to_string(index.shape()),
                  " is larger than input ", shape_to_string(x.shape()), " in dim ", k);
  }
  Tensor idx = as_index(index, op::kGather);
  if (idx.numel() == 0) return empty(idx.shape(), x.options());
  return dispatch(op::kGather, {x.contiguous(), idx}, Attrs().set("dim", d))[0];
}

namespace {

Tensor scatter_add_with(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, bool trusted) {
  check_indexing(x, index, op::kScatterAdd);
  check_dense(src, op::kScatterAdd, "src");
  check_same_device({x, src}, op::kScatterAdd);
  int64_t d = normalize_dim(dim, x.dim(), op::kScatterAdd);
  COPPICE_CHECK(src.dtype() == x.dtype(), "scatter_add: src has dtype ", dtype_name(src.dtype()), ", expected ",
                dtype_name(x.dtype()), " like the input");
  COPPICE_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), "scatter_add: input ", shape_to_string(x.shape()),
                ", index ", shape_to_string(index.shape()), " and src ", shape_to_string(src.shape()),
                " must have the same number of dims");
  for (int64_t k = 0; k < x.dim(); ++k) {
    COPPICE_CHECK(index.size(k) <= src.size(k), "scatter_add: index ", shape_to_string(index.shape()),
                  " is larger than src ", shape_to_string(src.shape()), " in dim ", k);
    COPPICE_CHECK(k == d || index.size(k) <= x.size(k), "scatter_add: index ", shape_to_string(index.shape()),
                  " is larger than input ", shape_to_string(x.shape()), " in dim ", k);
  }
  Tensor idx = as_index(index, op::kScatterAdd);
  if (idx.numel() == 0) return x.clone();
  // The kernel reads src in index's shape.
  Tensor part = src;
  for (int64_t k = 0; k < x.dim(); ++k) part = part.narrow(k, 0, index.size(k));
  return dispatch(op::kScatterAdd, {x.contiguous(), idx, part.contiguous()},
                  Attrs().set("dim", d).set("trusted", trusted))[0];
}

}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_add_with(x, dim, index, src, false);
}

Tensor scatter_add_trusted(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_add_with(x, dim, index, src, true);
}

void index_copy_(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_indexing(x, index, op::kIndexCopy);
  check_dense(src, op::kIndexCopy, "src");
  check_same_device({x, src}, op::kIndexCopy);
  const int64_t d = normalize_dim(dim, x.dim(), op::kIndexCopy);
  COPPICE_CHECK(x.is_contiguous(), "index_copy_: the destination ", shape_to_string(x.shape()),
                " must be contiguous (it is written in place)");
  COPPICE_CHECK(!x.storage().read_only(), "index_copy_: the destination ", shape_to_string(x.shape()),
                " is on read-only memory (its owner forbids writes)");
  COPPICE_CHECK(index.dim() <= 1, "index_copy_: index must be 0-D or 1-D, got ", shape_to_string(index.shape()));
  COPPICE_CHECK(src.dtype() == x.dtype(), "index_copy_: src has dtype ", dtype_name(src.dtype()), ", expected ",
                dtype_name(x.dtype()), " like the destination");
  Shape want = x.shape();
  want[d] = index.numel();
  COPPICE_CHECK(src.shape() == want, "index_copy_: src has shape ", shape_to_string(src.shape()), ", expected ",
                shape_to_string(want), " (the destination's, with the ", index.numel(), " indices along dim ", d, ")");
  if (index.numel() == 0) return;
  dispatch(op::kIndexCopy, {x, as_index(index, op::kIndexCopy).reshape({-1}), src.contiguous()}, Attrs().set("dim", d));
}

}  // namespace coppice
