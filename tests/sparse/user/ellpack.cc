#include "tests/sparse/user/ellpack.h"

#include <algorithm>

#include "sparse/formats.h"
#include "tensor/dispatcher.h"

namespace coppice::ellpack_test {

std::atomic<int> matmul_calls{0}, sddmm_calls{0};

Tensor sparse_ellpack(const Tensor& cols, const Tensor& values, const Shape& shape) {
  COPPICE_CHECK(shape.size() == 2 && cols.dim() == 2 && values.shape() == cols.shape() && cols.size(0) == shape[0],
                "sparse_ellpack: bad part shapes");
  const auto c = cols.to_vector<int64_t>();
  const int64_t k = cols.size(1);
  for (int64_t r = 0; r < shape[0]; ++r) {
    int64_t prev = -1;
    bool pad = false;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) {
        COPPICE_CHECK(col == -1, "sparse_ellpack: cols[", r, ", ", s, "] = ", col);
        pad = true;
        continue;
      }
      COPPICE_CHECK(!pad && col > prev && col < shape[1], "sparse_ellpack: cols[", r, ", ", s, "] = ", col);
      prev = col;
    }
  }
  return Tensor(std::make_shared<EllpackImpl>(cols.to(DType::kI32).contiguous(), values.contiguous(), shape,
                                              new_pattern_version()));
}

const EllpackImpl& ellpack(const Tensor& t) { return dynamic_cast<const EllpackImpl&>(*t.impl()); }

namespace {

// The entries of dense [rows, cols] where mask holds, each row's in column
// order, k the longest row's count (at least 1).
Tensor ellpack_from_mask(const Tensor& dense, const Tensor& mask, const FormatOptions&, std::string_view op) {
  COPPICE_CHECK(dense.dim() == 2, op, ": ellpack needs a 2-D tensor");
  const int64_t rows = dense.size(0), ncols = dense.size(1);
  const auto keep = mask.to_vector<bool>();
  const auto v = dense.contiguous().to_vector<double>();
  int64_t k = 1;
  for (int64_t r = 0; r < rows; ++r) {
    k = std::max<int64_t>(k, std::count(keep.begin() + r * ncols, keep.begin() + (r + 1) * ncols, true));
  }
  std::vector<int32_t> cols(static_cast<size_t>(rows * k), -1);
  std::vector<double> vals(static_cast<size_t>(rows * k), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t s = 0;
    for (int64_t c = 0; c < ncols; ++c) {
      if (!keep[static_cast<size_t>(r * ncols + c)]) continue;
      cols[static_cast<size_t>(r * k + s)] = static_cast<int32_t>(c);
      vals[static_cast<size_t>(r * k + s)] = v[static_cast<size_t>(r * ncols + c)];
      ++s;
    }
  }
  return sparse_ellpack(from_vector(cols, {rows, k}),
                        from_vector(vals, {rows, k}, TensorOptions(DType::kF64)).to(dense.dtype()), dense.shape());
}

// out[r, :] = sum_s values[r, s] * b[cols[r, s], :]
std::vector<Tensor> ellpack_matmul(const std::vector<Tensor>& in, const Attrs&) {
  const EllpackImpl& a = ellpack(in[0]);
  const Tensor& b = in[1];
  ++matmul_calls;
  const int64_t rows = a.shape()[0], k = a.k(), n = b.size(1);
  const auto c = a.cols().to_vector<int64_t>();
  const auto v = a.values().to_vector<double>();
  const auto bv = b.contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(rows * n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) continue;
      const double w = v[static_cast<size_t>(r * k + s)];
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(r * n + j)] += w * bv[static_cast<size_t>(col * n + j)];
    }
  }
  return {from_vector(out, {rows, n}, TensorOptions(DType::kF64)).to(a.dtype())};
}

// (x @ y) at the pattern's stored slots; padding slots get 0.
std::vector<Tensor> ellpack_sddmm(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& y = in[1];
  const EllpackImpl& p = ellpack(in[2]);
  ++sddmm_calls;
  const int64_t rows = p.shape()[0], k = p.k(), inner = x.size(1), n = y.size(1);
  const auto c = p.cols().to_vector<int64_t>();
  const auto xv = x.contiguous().to_vector<double>();
  const auto yv = y.contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(rows * k), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t col = c[static_cast<size_t>(r * k + s)];
      if (col < 0) continue;
      double acc = 0;
      for (int64_t i = 0; i < inner; ++i) {
        acc += xv[static_cast<size_t>(r * inner + i)] * yv[static_cast<size_t>(i * n + col)];
      }
      out[static_cast<size_t>(r * k + s)] = acc;
    }
  }
  return {p.with_values(from_vector(out, {rows, k}, TensorOptions(DType::kF64)).to(p.dtype()))};
}

const bool kRegistered = [] {
  FormatSpec spec;
  spec.name = "ellpack";
  spec.rank = FormatRank::kMatrix;
  spec.parts = {"cols", "values"};
  spec.from_mask = ellpack_from_mask;
  spec.from_parts = [](const FormatParts& p) {
    return sparse_ellpack(p.parts.at("cols"), p.parts.at("values"), p.shape);
  };
  register_format(std::move(spec));
  Dispatcher& d = Dispatcher::instance();
  d.register_to_dense("ellpack", [](const Tensor& t) { return ellpack(t).to_dense(); });
  d.register_kernel(op::kMatmul, DeviceType::kCpu, {"ellpack", "dense"}, ellpack_matmul);
  d.register_kernel(op::kSddmm, DeviceType::kCpu, {"dense", "dense", "ellpack"}, ellpack_sddmm);
  return true;
}();

}  // namespace

bool registered() { return kRegistered; }

}  // namespace coppice::ellpack_test
