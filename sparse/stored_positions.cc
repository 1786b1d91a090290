#include "sparse/stored_positions.h"

#include "sparse/blocked_ell.h"
#include "sparse/bsr.h"
#include "sparse/coo.h"
#include "sparse/csr.h"
#include "sparse/formats.h"
#include "sparse/masked.h"
#include "sparse/nm.h"

namespace coppice {
namespace {

// Host copies of index parts, alive as long as the holder.
class HostParts {
 public:
  template <typename I>
  const I* get(const Tensor& part) {
    kept_.push_back(part.to(Device::cpu()).contiguous());
    return kept_.back().data<I>();
  }

 private:
  std::vector<Tensor> kept_;
};

}  // namespace

std::vector<int64_t> stored_positions(const Tensor& t) {
  constexpr std::string_view op = "stored_positions";
  HostParts host;
  const Shape& shape = t.shape();
  const int64_t cols = shape.empty() ? 1 : shape.back();
  switch (t.layout()) {
    case Layout::kCsr:
    case Layout::kCsc: {
      const CompressedImpl& c = csr_impl(t, op);
      const int32_t* ptr = host.get<int32_t>(c.pointers());
      const int32_t* idx = host.get<int32_t>(c.indices());
      std::vector<int64_t> pos(static_cast<size_t>(c.nnz()));
      const bool csr = c.is_csr();
      for (int64_t o = 0; o < c.compressed_size(); ++o) {
        for (int64_t e = ptr[o]; e < ptr[o + 1]; ++e) {
          pos[static_cast<size_t>(e)] = csr ? o * cols + idx[e] : static_cast<int64_t>(idx[e]) * cols + o;
        }
      }
      return pos;
    }
    case Layout::kCoo: {
      const CooImpl& c = coo_impl(t, op);
      const int64_t nnz = c.nnz(), ndim = t.dim();
      const int64_t* idx = host.get<int64_t>(c.indices());
      std::vector<int64_t> pos(static_cast<size_t>(nnz), 0);
      for (int64_t d = 0; d < ndim; ++d) {
        for (int64_t e = 0; e < nnz; ++e)
          pos[static_cast<size_t>(e)] = pos[static_cast<size_t>(e)] * shape[d] + idx[d * nnz + e];
      }
      return pos;
    }
    case Layout::kBsr: {
      const BsrImpl& b = bsr_impl(t, op);
      const int32_t* ptr = host.get<int32_t>(b.crow_indices());
      const int32_t* bcol = host.get<int32_t>(b.col_indices());
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
      const int32_t* ell = host.get<int32_t>(b.ell_col_indices());
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
      const uint8_t* idx = host.get<uint8_t>(s.indices());
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
      const bool* mask = host.get<bool>(s.mask());
      std::vector<int64_t> pos(static_cast<size_t>(t.numel()));
      for (int64_t p = 0; p < t.numel(); ++p) pos[static_cast<size_t>(p)] = mask[p] ? p : -1;
      return pos;
    }
    case Layout::kCustom:
      if (const FormatSpec* spec = find_format(t.format()); spec != nullptr && spec->stored_positions) {
        return spec->stored_positions(t);
      }
      break;
    case Layout::kDense: break;
  }
  fail(op, ": format '", t.format(),
       "' has no stored positions (a user's format gives them in its row's "
       "stored_positions, sparse/formats.h)");
}

}  // namespace coppice
