#include "sparse/nm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "sparse/index_util.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::host_i64;
using sparse_detail::index_tensor;

const ToDenseRegistrar kNmToDense("nm");

Shape values_shape(const Shape& shape, int64_t n, int64_t m) {
  Shape s = shape;
  s.back() = shape.back() / m * n;
  return s;
}

// The n:m tensor whose slot k holds flat element source[k] of `dense`
// (source == numel: an explicit zero) at in-group position pos[k].
Tensor assemble(const Tensor& dense, const std::vector<int64_t>& source, const std::vector<int64_t>& pos, int64_t n,
                int64_t m) {
  const Shape vshape = values_shape(dense.shape(), n, m);
  Tensor flat = cat({dense.contiguous().reshape({-1}), zeros({1}, dense.options())}, 0);
  Tensor values = index_select(flat, 0, index_tensor(source, DType::kI64, dense.device())).view(vshape);
  Tensor indices = index_tensor(pos, vshape, DType::kU8, dense.device());
  return Tensor(std::make_shared<NmImpl>(values, indices, dense.shape(), n, m, new_pattern_version()));
}

void check_dense_input(const Tensor& dense, int64_t n, int64_t m, std::string_view op) {
  sparse_detail::check_values(dense, op);
  COPPICE_CHECK(dense.dim() >= 1, op, ": needs at least one dimension, got a 0-d tensor");
  check_nm_shape(dense.shape(), n, m, op);
}

}  // namespace

NmImpl::NmImpl(Tensor values, Tensor indices, Shape shape, int64_t n, int64_t m, uint64_t version)
    : SparseImpl(std::move(shape), values.dtype(), values.device(), version),
      values_(std::move(values)),
      indices_(std::move(indices)),
      n_(n),
      m_(m) {}

SparseParts NmImpl::parts() const { return {{"values", values_}, {"indices", indices_}}; }

std::map<std::string, std::string> NmImpl::attributes() const {
  return {{"n", std::to_string(n_)}, {"m", std::to_string(m_)}};
}

Tensor NmImpl::with_values(const Tensor& values) const {
  sparse_detail::check_values(values, "nm.with_values");
  COPPICE_CHECK(values.shape() == values_.shape(), "nm.with_values: values of shape ", shape_to_string(values.shape()),
                ", expected ", shape_to_string(values_.shape()));
  COPPICE_CHECK(values.device() == device(), "nm.with_values: values on ", values.device().to_string(),
                " for a pattern on ", device().to_string());
  return Tensor(std::make_shared<NmImpl>(values.contiguous(), indices_, shape(), n_, m_, pattern_version()));
}

Tensor NmImpl::to_dense() const {
  // On a device with its own kernel (sparse/cuda: one scatter pass, nothing
  // leaves the device). The host positions below took about 0.1 s for a
  // 4096 x 4096 2:4 weight, which SR-STE paid at every mask update.
  if (!device().is_cpu() && is_floating(dtype())) {
    if (const Kernel* k = Dispatcher::instance().find(op::kNmToDense, device().type, {"nm"})) {
      return (*k)({Tensor(std::make_shared<NmImpl>(*this))}, Attrs())[0];
    }
  }
  const int64_t groups = groups_per_row(), cols = shape().back();
  std::vector<int64_t> pos = host_i64(indices_);
  std::vector<int64_t> flat(pos.size());
  for (size_t k = 0; k < pos.size(); ++k) {
    const int64_t slot = static_cast<int64_t>(k);
    const int64_t row = slot / (groups * n_), g = (slot / n_) % groups;
    flat[k] = row * cols + g * m_ + pos[k];
  }
  return sparse_detail::scatter_to_dense(index_tensor(flat, DType::kI64, device()), values_, shape());
}

Tensor NmImpl::to(TensorOptions options) const {
  if (options.device == device() && options.dtype == dtype()) return Tensor(std::make_shared<NmImpl>(*this));
  return Tensor(
      std::make_shared<NmImpl>(values_.to(options), indices_.to(options.device), shape(), n_, m_, pattern_version()));
}

void check_nm_shape(const Shape& shape, int64_t n, int64_t m, std::string_view op) {
  COPPICE_CHECK(1 <= n && n <= m && m <= 256, op, ": needs 1 <= n <= m <= 256, got n = ", n, ", m = ", m);
  COPPICE_CHECK(!shape.empty() && shape.back() % m == 0, op, ": m = ", m, " does not divide the last dim of shape ",
                shape_to_string(shape));
}

Tensor sparse_nm(const Tensor& values, const Tensor& indices, const Shape& shape, int64_t n, int64_t m) {
  constexpr std::string_view op = "sparse_nm";
  sparse_detail::check_shape(shape, -1, op);
  check_nm_shape(shape, n, m, op);
  sparse_detail::check_values(values, op);
  sparse_detail::check_index_part(indices, op, "indices", {DType::kU8, DType::kI32, DType::kI64});
  check_same_device({values, indices}, op);
  const Shape vshape = values_shape(shape, n, m);
  COPPICE_CHECK(values.shape() == vshape && indices.shape() == vshape, op, ": values and indices have shapes ",
                shape_to_string(values.shape()), " and ", shape_to_string(indices.shape()), ", expected ",
                shape_to_string(vshape), " (the last dim holds n = ", n, " of every m = ", m, ")");
  std::vector<int64_t> pos = host_i64(indices);
  const int64_t width = vshape.back(), groups = shape.back() / m;
  for (size_t k = 0; k < pos.size(); ++k) {
    const int64_t slot = static_cast<int64_t>(k), row = slot / std::max<int64_t>(width, 1), col = slot % width;
    COPPICE_CHECK(pos[k] >= 0 && pos[k] < m, op, ": indices[row ", row, ", ", col, "] = ", pos[k],
                  " is out of range [0, m = ", m, ")");
    if (col % n != 0) {
      COPPICE_CHECK(pos[k - 1] < pos[k], op, ": indices[row ", row, ", ", col, "] = ", pos[k],
                    (pos[k - 1] == pos[k] ? " duplicates" : " is smaller than"), " the index before it in group ",
                    col / n, " of ", groups, " (indices must increase within a group)");
    }
  }
  return Tensor(std::make_shared<NmImpl>(values.contiguous(), indices.to(DType::kU8).contiguous(), shape, n, m,
                                         new_pattern_version()));
}

Tensor nm_compress(const Tensor& dense, int64_t n, int64_t m) {
  check_dense_input(dense, n, m, "nm_compress");
  // 2:4 on a device with its own selection kernel (sparse/cuda: one pass,
  // nothing leaves the device); every other n:m ranks on the host.
  if (n == 2 && m == 4 && !dense.device().is_cpu() && dense.dtype() != DType::kF64) {
    if (const Kernel* k = Dispatcher::instance().find(op::kNm24Compress, dense.device().type, {"dense"})) {
      const std::vector<Tensor> parts = (*k)({dense}, Attrs());
      return Tensor(std::make_shared<NmImpl>(parts[0], parts[1], dense.shape(), n, m, new_pattern_version()));
    }
  }
  Tensor host = dense.to(TensorOptions(DType::kF64, Device::cpu())).contiguous();
  const double* x = host.data<double>();
  const int64_t ngroups = dense.numel() / m;
  std::vector<int64_t> source(static_cast<size_t>(ngroups * n)), pos(source.size());
  std::vector<int64_t> order(static_cast<size_t>(m));
  auto magnitude = [](double v) { return std::isnan(v) ? HUGE_VAL : std::fabs(v); };
  for (int64_t g = 0; g < ngroups; ++g) {
    const double* group = x + g * m;
    std::iota(order.begin(), order.end(), 0);
    // n largest |x|, ties to the lower index (stable: order starts sorted).
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double ma = magnitude(group[a]), mb = magnitude(group[b]);
      return ma > mb || (std::isinf(ma) && std::isinf(mb) && std::isnan(group[a]) && !std::isnan(group[b]));
    });
    std::sort(order.begin(), order.begin() + n);
    for (int64_t j = 0; j < n; ++j) {
      source[static_cast<size_t>(g * n + j)] = g * m + order[static_cast<size_t>(j)];
      pos[static_cast<size_t>(g * n + j)] = order[static_cast<size_t>(j)];
    }
  }
  return assemble(dense, source, pos, n, m);
}

namespace sparse_detail {
Tensor nm_from_mask(const Tensor& dense, const Tensor& mask, int64_t n, int64_t m, std::string_view op) {
  check_dense_input(dense, n, m, op);
  check_dense(mask, op, "mask");
  COPPICE_CHECK(mask.dtype() == DType::kBool, op, ": mask must be bool, got ", dtype_name(mask.dtype()));
  COPPICE_CHECK(mask.shape() == dense.shape(), op, ": mask of shape ", shape_to_string(mask.shape()),
                " for a tensor of shape ", shape_to_string(dense.shape()));
  check_same_device({dense, mask}, op);
  // 2:4 on a device with its own kernel: nothing leaves the device but the
  // index of a group that keeps too many (then the host loop below names it).
  if (n == 2 && m == 4 && !dense.device().is_cpu()) {
    if (const Kernel* k =
            Dispatcher::instance().find(op::kNm24CompressMasked, dense.device().type, {"dense", "dense"})) {
      const std::vector<Tensor> parts = (*k)({dense, mask}, Attrs());
      if (parts[2].to(Device::cpu()).data<int64_t>()[0] < 0) {
        return Tensor(std::make_shared<NmImpl>(parts[0], parts[1], dense.shape(), n, m, new_pattern_version()));
      }
    }
  }
  std::vector<uint8_t> keep = host_mask(mask);
  const int64_t numel = dense.numel(), ngroups = numel / m, groups = dense.shape().back() / m;
  std::vector<int64_t> source(static_cast<size_t>(ngroups * n)), pos(source.size());
  std::vector<int64_t> chosen;
  for (int64_t g = 0; g < ngroups; ++g) {
    const uint8_t* group = keep.data() + g * m;
    const int64_t count = std::count(group, group + m, uint8_t{1});
    COPPICE_CHECK(count <= n, op, ": group ", g % groups, " of row ", g / groups, " (last-dim positions ",
                  (g % groups) * m, "..", (g % groups) * m + m - 1, ") has ", count, " non-zeros, more than n = ", n,
                  " (n:m = ", n, ":", m, ")");
    chosen.clear();
    int64_t fill = n - count;  // explicit zeros at the lowest free positions
    for (int64_t j = 0; j < m; ++j) {
      if (group[j]) {
        chosen.push_back(j);
      } else if (fill > 0) {
        chosen.push_back(~j);  // marks a zero slot
        --fill;
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = chosen[static_cast<size_t>(j)];
      const int64_t p = c >= 0 ? c : ~c;
      pos[static_cast<size_t>(g * n + j)] = p;
      source[static_cast<size_t>(g * n + j)] = c >= 0 ? g * m + p : numel;
    }
  }
  return assemble(dense, source, pos, n, m);
}
}  // namespace sparse_detail

Tensor nm_compress(const Tensor& dense, const Tensor& mask, int64_t n, int64_t m) {
  return sparse_detail::nm_from_mask(dense, mask, n, m, "nm_compress");
}

Tensor nm_decompress(const Tensor& t) { return nm_impl(t, "nm_decompress").to_dense(); }

const NmImpl& nm_impl(const Tensor& t, std::string_view op) {
  const NmImpl* s = t.impl_as<NmImpl>();
  COPPICE_CHECK(s != nullptr, op, ": expected an n:m tensor, got format '", t.format(), "'");
  return *s;
}

}  // namespace coppice
