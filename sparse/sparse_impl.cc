#include "sparse/sparse_impl.h"

#include <atomic>
#include <iomanip>
#include <sstream>

#include "tensor/dispatcher.h"

namespace coppice {

uint64_t new_pattern_version() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

const SparseImpl& sparse_impl(const Tensor& t, std::string_view op) {
  const SparseImpl* s = t.impl_as<SparseImpl>();
  COPPICE_CHECK(s != nullptr, op, ": expected a sparse tensor, got format '", t.format(), "'");
  return *s;
}

int64_t nnz(const Tensor& t) { return t.is_dense() ? t.numel() : sparse_impl(t, "nnz").nnz(); }

double density(const Tensor& t) {
  int64_t n = t.numel();
  return n == 0 ? 1.0 : static_cast<double>(nnz(t)) / static_cast<double>(n);
}

uint64_t pattern_version(const Tensor& t) {
  return t.is_dense() ? 0 : sparse_impl(t, "pattern_version").pattern_version();
}

Tensor values(const Tensor& t) { return t.is_dense() ? t : sparse_impl(t, "values").values(); }

Tensor with_values(const Tensor& t, const Tensor& values) {
  if (t.is_dense()) {
    COPPICE_CHECK(values.shape() == t.shape(), "with_values: dense values of shape ", shape_to_string(values.shape()),
                  " for a tensor of shape ", shape_to_string(t.shape()));
    return values;
  }
  return sparse_impl(t, "with_values").with_values(values);
}

Tensor to_dense(const Tensor& t) { return t.is_dense() ? t : sparse_impl(t, "to_dense").to_dense(); }

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  return t.is_dense() ? t.to(device) : sparse_impl(t, "to_device").to(TensorOptions(t.dtype(), device));
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return t.is_dense() ? t.to(dtype) : sparse_impl(t, "to_dtype").to(TensorOptions(dtype, t.device()));
}

std::string to_string(const Tensor& t, int64_t max_part_elements) {
  if (!t.defined() || t.is_dense()) return t.to_string();
  const SparseImpl& s = sparse_impl(t, "to_string");
  std::ostringstream os;
  os << "tensor(format=" << t.format() << ", shape=" << shape_to_string(t.shape())
     << ", dtype=" << dtype_name(t.dtype()) << ", device=" << t.device().to_string() << ", nnz=" << s.nnz()
     << ", density=" << std::setprecision(4) << density(t) << ", pattern_version=" << s.pattern_version();
  for (const auto& [name, value] : s.attributes()) os << ", " << name << "=" << value;
  os << ")";
  for (const auto& [name, part] : s.parts()) {
    os << "\n  " << name << ": ";
    if (part.numel() <= max_part_elements) {
      os << part.to_string();
    } else {
      os << dtype_name(part.dtype()) << " " << shape_to_string(part.shape()) << " (not shown: more than "
         << max_part_elements << " elements)";
    }
  }
  return os.str();
}

ToDenseRegistrar::ToDenseRegistrar(std::string format) {
  Dispatcher::instance().register_to_dense(std::move(format), [](const Tensor& t) { return to_dense(t); });
}

}  // namespace coppice
