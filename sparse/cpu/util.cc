#include "sparse/cpu/util.h"

#include <cstdlib>

#include "sparse/convert.h"
#include "sparse/cpu/spmm_kernels.h"
#include "tensor/cpu/parallel.h"

namespace coppice::sparse_cpu {
namespace {

template <typename I>
const I* host_data(const Tensor& t, std::string_view op) {
  COPPICE_CHECK(t.device().is_cpu() && t.is_contiguous(), op, ": index parts must be contiguous on the CPU");
  return t.data<I>();
}

}  // namespace

bool use_avx2() {
  static const bool on = [] {
    const char* env = std::getenv("COPPICE_CPU_SIMD");
    if (env != nullptr && std::string_view(env) == "sse") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return on;
}

DType accumulate_dtype(DType t) { return t == DType::kF64 ? DType::kF64 : DType::kF32; }

Tensor contiguous_as(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

void check_matrix(const Tensor& t, std::string_view op, std::string_view what) {
  COPPICE_CHECK(t.dim() == 2, op, ": ", what, " must be 2-D, got shape ", shape_to_string(t.shape()), " (format ",
                t.format(), ")");
}

void check_inputs(const std::vector<Tensor>& in, size_t n, std::string_view op) {
  COPPICE_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
  for (size_t i = 0; i < n; ++i) {
    COPPICE_CHECK(in[i].defined(), op, ": input ", i, " is undefined");
    COPPICE_CHECK(is_floating(in[i].dtype()), op, ": input ", i, " has dtype ", dtype_name(in[i].dtype()),
                  ", expected a floating type");
    COPPICE_CHECK(in[i].dtype() == in[0].dtype(), op, ": inputs have different dtypes (", dtype_name(in[0].dtype()),
                  " and ", dtype_name(in[i].dtype()), "); convert them first");
  }
}

std::vector<int64_t> stored_positions(const Tensor& t) {
  constexpr std::string_view op = "stored_positions";
  const Shape& shape = t.shape();
  const int64_t cols = shape.empty() ? 1 : shape.back();
  switch (t.layout()) {
    case Layout::kCsr:
    case Layout::kCsc: {
      const CompressedImpl& c = csr_impl(t, op);
      const int32_t* ptr = host_data<int32_t>(c.pointers(), op);
      const int32_t* idx = host_data<int32_t>(c.indices(), op);
      std::vector<int64_t> pos(static_cast<size_t>(c.nnz()));
      const bool csr = c.is_csr();
      cpu::parallel_for(0, c.compressed_size(), 1024, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          for (int64_t e = ptr[o]; e < ptr[o + 1]; ++e) {
            pos[static_cast<size_t>(e)] = csr ? o * cols + idx[e] : static_cast<int64_t>(idx[e]) * cols + o;
          }
        }
      });
      return pos;
    }
    case Layout::kCoo: {
      const CooImpl& c = coo_impl(t, op);
      const int64_t nnz = c.nnz(), ndim = t.dim();
      const int64_t* idx = host_data<int64_t>(c.indices(), op);
      std::vector<int64_t> pos(static_cast<size_t>(nnz), 0);
      for (int64_t d = 0; d < ndim; ++d) {
        for (int64_t e = 0; e < nnz; ++e)
          pos[static_cast<size_t>(e)] = pos[static_cast<size_t>(e)] * shape[d] + idx[d * nnz + e];
      }
      return pos;
    }
    case Layout::kBsr: {
      const BsrImpl& b = bsr_impl(t, op);
      const int32_t* ptr = host_data<int32_t>(b.crow_indices(), op);
      const int32_t* bcol = host_data<int32_t>(b.col_indices(), op);
      const int64_t bh = b.block_rows(), bw = b.block_cols();
      std::vector<int64_t> pos(static_cast<size_t>(b.nnz()));
      for (int64_t br = 0; br < b.block_row_count(); ++br) {
        for (int64_t k = ptr[br]; k < ptr[br + 1]; ++k) {
          for (int64_t i = 0; i < bh; ++i) {
            for (int64_t j = 0; j < bw; ++j) {
              pos[static_cast<size_t>((k * bh + i) * bw + j)] = (br * bh + i) * cols + bcol[k] * bw + j;
            }
          }
        }
      }
      return pos;
    }
    case Layout::kBlockedEll: {
      const BlockedEllImpl& b = blocked_ell_impl(t, op);
      const int32_t* ell = host_data<int32_t>(b.ell_col_indices(), op);
      const int64_t bs = b.block_size(), ec = b.ell_cols(), rows = shape[0];
      std::vector<int64_t> pos(static_cast<size_t>(rows * ec * bs));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < ec; ++j) {
          const int64_t bc = ell[(r / bs) * ec + j];
          for (int64_t x = 0; x < bs; ++x) {
            pos[static_cast<size_t>((r * ec + j) * bs + x)] = bc < 0 ? -1 : r * cols + bc * bs + x;
          }
        }
      }
      return pos;
    }
    case Layout::kNm: {
      const NmImpl& s = nm_impl(t, op);
      const uint8_t* idx = host_data<uint8_t>(s.indices(), op);
      const int64_t n = s.n(), m = s.m(), g = s.groups_per_row(), rows = s.rows();
      std::vector<int64_t> pos(static_cast<size_t>(rows * g * n));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t q = 0; q < g * n; ++q) {
          const int64_t slot = r * g * n + q;
          pos[static_cast<size_t>(slot)] = r * cols + (q / n) * m + idx[slot];
        }
      }
      return pos;
    }
    case Layout::kMasked: {
      const MaskedImpl& s = masked_impl(t, op);
      const bool* mask = host_data<bool>(s.mask(), op);
      std::vector<int64_t> pos(static_cast<size_t>(t.numel()));
      for (int64_t p = 0; p < t.numel(); ++p) pos[static_cast<size_t>(p)] = mask[p] ? p : -1;
      return pos;
    }
    case Layout::kDense:
    case Layout::kCustom:
      break;
  }
  fail(op, ": format '", t.format(), "' is not one of sparse/'s formats");
}

void register_cpu(std::string_view op, const std::vector<std::vector<std::string>>& formats, const Kernel& kernel) {
  for (const std::vector<std::string>& f : formats) {
    Dispatcher::instance().register_kernel(std::string(op), DeviceType::kCpu, f, kernel);
  }
}

}  // namespace coppice::sparse_cpu
