#include "models/graph_adjacency.h"

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "sparse/csr.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// A square CSR's rows on the host: its pointers, column indices and values (f64).
struct HostCsr {
  int64_t n = 0;
  std::vector<int32_t> crow, col;
  std::vector<double> values;
};

HostCsr host_csr(const Tensor& a, std::string_view op) {
  COPPICE_CHECK(a.defined(), op, ": adjacency is undefined");
  COPPICE_CHECK(a.is_sparse() && a.format() == "csr", op, ": adjacency must be a CSR tensor, got format '", a.format(),
                "'");
  COPPICE_CHECK(a.dim() == 2 && a.size(0) == a.size(1), op, ": adjacency must be square [n, n], got ",
                shape_to_string(a.shape()));
  const CompressedImpl& impl = csr_impl(a, op);
  HostCsr h;
  h.n = a.size(0);
  h.crow = impl.pointers().to(Device::cpu()).to_vector<int32_t>();
  h.col = impl.indices().to(Device::cpu()).to_vector<int32_t>();
  h.values = impl.values().to(TensorOptions(DType::kF64, Device::cpu())).to_vector<double>();
  return h;
}

Tensor make_csr(const std::vector<int32_t>& crow, const std::vector<int32_t>& col, const std::vector<double>& values,
                int64_t n, DType dtype) {
  return sparse_csr(from_vector(crow), from_vector(col), from_vector(values).to(TensorOptions(dtype)), {n, n});
}

}  // namespace

Tensor gcn_adjacency(const Tensor& adjacency, std::optional<DType> dtype) {
  constexpr std::string_view op = "gcn_adjacency";
  const HostCsr a = host_csr(adjacency, op);
  // A + I, row by row, columns kept increasing (the diagonal slotted in).
  std::vector<int32_t> crow{0}, col;
  std::vector<double> values;
  for (int64_t r = 0; r < a.n; ++r) {
    bool placed = false;
    const auto place_diagonal = [&] {
      col.push_back(static_cast<int32_t>(r));
      values.push_back(1.0);
      placed = true;
    };
    for (int32_t k = a.crow[r]; k < a.crow[r + 1]; ++k) {
      if (a.col[k] == r) continue;  // replaced by the self-loop
      if (!placed && a.col[k] > r) place_diagonal();
      col.push_back(a.col[k]);
      values.push_back(a.values[k]);
    }
    if (!placed) place_diagonal();
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  std::vector<double> inv_sqrt(static_cast<size_t>(a.n));
  for (int64_t r = 0; r < a.n; ++r) {
    double degree = 0.0;
    for (int32_t k = crow[r]; k < crow[r + 1]; ++k) degree += values[k];
    COPPICE_CHECK(degree > 0.0, op, ": adjacency row ", r, " sums to ", degree,
                  " with its self-loop; the degrees must be positive (negative edge weights?)");
    inv_sqrt[r] = 1.0 / std::sqrt(degree);
  }
  for (int64_t r = 0; r < a.n; ++r) {
    for (int32_t k = crow[r]; k < crow[r + 1]; ++k) values[k] *= inv_sqrt[r] * inv_sqrt[col[k]];
  }
  return make_csr(crow, col, values, a.n, dtype.value_or(adjacency.dtype()));
}

Tensor mean_adjacency(const Tensor& adjacency, std::optional<DType> dtype) {
  constexpr std::string_view op = "mean_adjacency";
  const HostCsr a = host_csr(adjacency, op);
  std::vector<int32_t> crow{0}, col;
  std::vector<double> values;
  for (int64_t r = 0; r < a.n; ++r) {
    const size_t first = col.size();
    double sum = 0.0;
    for (int32_t k = a.crow[r]; k < a.crow[r + 1]; ++k) {
      if (a.col[k] == r) continue;
      COPPICE_CHECK(a.values[k] >= 0.0, op, ": adjacency (", r, ", ", a.col[k], ") is ", a.values[k],
                    "; edge weights must be non-negative");
      col.push_back(a.col[k]);
      values.push_back(a.values[k]);
      sum += a.values[k];
    }
    for (size_t k = first; k < col.size(); ++k) values[k] = sum > 0.0 ? values[k] / sum : 0.0;
    crow.push_back(static_cast<int32_t>(col.size()));
  }
  return make_csr(crow, col, values, a.n, dtype.value_or(adjacency.dtype()));
}

}  // namespace coppice
