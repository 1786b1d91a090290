// Per tile, every pattern is scored and the best kept. A pattern is a choice
// of n columns per row (a "combination"), so its score is the sum of its rows'
// combination scores: those are computed once per tile row (6 for 2:4) and
// each of the patterns (90) costs m additions, not m * n.
#include "sparse/nm_transposable.h"

#include <cmath>
#include <string_view>
#include <vector>

#include "tensor/cpu/parallel.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

constexpr std::string_view kOp = "transposable_nm_mask";

// The n-subsets of [0, m), each as its sorted positions and as a bit set, in
// lexicographic order of the positions (the tie order of the header).
struct Combinations {
  std::vector<std::vector<int64_t>> positions;
  std::vector<uint32_t> bits;
};

void list_combinations(int64_t n, int64_t m, int64_t start, std::vector<int64_t>& prefix, Combinations& out) {
  if (static_cast<int64_t>(prefix.size()) == n) {
    uint32_t b = 0;
    for (int64_t p : prefix) b |= 1u << p;
    out.positions.push_back(prefix);
    out.bits.push_back(b);
    return;
  }
  for (int64_t p = start; p < m; ++p) {
    prefix.push_back(p);
    list_combinations(n, m, p + 1, prefix, out);
    prefix.pop_back();
  }
}

// The tile patterns as one combination index per row, in the order of the
// header: depth first over rows, each row's combinations in order, keeping
// the patterns whose every column has exactly n entries.
void list_patterns(const Combinations& combos, int64_t n, int64_t m, std::vector<int64_t>& rows,
                   std::vector<int64_t>& column_counts, std::vector<std::vector<int64_t>>& out) {
  if (static_cast<int64_t>(rows.size()) == m) {
    out.push_back(rows);  // every column has n: the counts below never exceed n and sum to m * n
    return;
  }
  for (size_t c = 0; c < combos.positions.size(); ++c) {
    bool fits = true;
    for (int64_t p : combos.positions[c]) fits = fits && column_counts[static_cast<size_t>(p)] < n;
    if (!fits) continue;
    for (int64_t p : combos.positions[c]) ++column_counts[static_cast<size_t>(p)];
    rows.push_back(static_cast<int64_t>(c));
    list_patterns(combos, n, m, rows, column_counts, out);
    rows.pop_back();
    for (int64_t p : combos.positions[c]) --column_counts[static_cast<size_t>(p)];
  }
}

// What a set of entries keeps, ranked as the header says: NaNs, then
// infinities, then the finite magnitudes.
struct Score {
  int64_t nans = 0, infs = 0;
  double finite = 0.0;

  void add(double v) {
    if (std::isnan(v)) {
      ++nans;
    } else if (std::isinf(v)) {
      ++infs;
    } else {
      finite += std::fabs(v);
    }
  }
  void add(const Score& s) {
    nans += s.nans;
    infs += s.infs;
    finite += s.finite;
  }
  bool beats(const Score& s) const {
    if (nans != s.nans) return nans > s.nans;
    if (infs != s.infs) return infs > s.infs;
    return finite > s.finite;
  }
};

void check_input(const Tensor& w, int64_t n, int64_t m) {
  check_dense(w, kOp, "w");
  COPPICE_CHECK(is_floating(w.dtype()), kOp, ": w must be floating point (f32, f64, bf16, f16), got ",
                dtype_name(w.dtype()));
  COPPICE_CHECK(w.dim() == 2, kOp, ": w must be 2-D [rows, cols], got shape ", shape_to_string(w.shape()));
  COPPICE_CHECK(m <= kMaxTransposableM, kOp, ": m = ", m, " is above the limit of ", kMaxTransposableM,
                " (the m x m patterns are enumerated, and there are 297,200 already for 3:6)");
  COPPICE_CHECK(1 <= n && n <= m, kOp, ": needs 1 <= n <= m, got n = ", n, ", m = ", m);
  COPPICE_CHECK(w.size(0) % m == 0 && w.size(1) % m == 0, kOp, ": m = ", m, " does not divide both dims of shape ",
                shape_to_string(w.shape()), " (the mask is chosen per ", m, " x ", m, " tile)");
}

}  // namespace

Tensor transposable_nm_mask(const Tensor& w, int64_t n, int64_t m) {
  check_input(w, n, m);
  // 2:4 on a device with its own kernel (sparse/cuda, the same selection bit
  // for bit); every other case on the host. The host pass over a 4096 x 4096
  // weight, a round trip included, made SR-STE's step with transposable masks
  // take seconds on the GPU.
  if (n == 2 && m == 4 && !w.device().is_cpu()) {
    if (const Kernel* k = Dispatcher::instance().find(op::kNm24TransposableMask, w.device().type, {"dense"})) {
      return (*k)({w}, Attrs())[0];
    }
  }
  Combinations combos;
  std::vector<int64_t> prefix;
  list_combinations(n, m, 0, prefix, combos);
  std::vector<std::vector<int64_t>> patterns;
  std::vector<int64_t> rows, column_counts(static_cast<size_t>(m), 0);
  list_patterns(combos, n, m, rows, column_counts, patterns);

  Tensor host = w.to(TensorOptions(DType::kF64, Device::cpu())).contiguous();
  const double* x = host.data<double>();
  const int64_t cols = w.size(1), tile_cols = cols / m, tiles = w.size(0) / m * tile_cols;
  const int64_t ncombos = static_cast<int64_t>(combos.bits.size());
  Tensor mask = Tensor::empty(w.shape(), TensorOptions(DType::kBool, Device::cpu()));
  bool* out = mask.data<bool>();
  // Tiles are independent and each writes its own entries, so the result does
  // not depend on the number of threads. 90 patterns of 4 rows per 2:4 tile.
  cpu::parallel_for(0, tiles, 256, [&](int64_t t0, int64_t t1) {
    std::vector<Score> row_scores(static_cast<size_t>(m * ncombos));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t origin = (t / tile_cols) * m * cols + (t % tile_cols) * m;
      for (int64_t r = 0; r < m; ++r) {
        const double* row = x + origin + r * cols;
        for (int64_t c = 0; c < ncombos; ++c) {
          Score s;
          for (int64_t p : combos.positions[static_cast<size_t>(c)]) s.add(row[p]);
          row_scores[static_cast<size_t>(r * ncombos + c)] = s;
        }
      }
      size_t best = 0;
      Score best_score;
      for (size_t k = 0; k < patterns.size(); ++k) {
        Score s;
        for (int64_t r = 0; r < m; ++r) s.add(row_scores[static_cast<size_t>(r * ncombos + patterns[k][r])]);
        if (k == 0 || s.beats(best_score)) {  // strictly better: ties keep the earlier pattern
          best = k;
          best_score = s;
        }
      }
      for (int64_t r = 0; r < m; ++r) {
        const uint32_t keep = combos.bits[static_cast<size_t>(patterns[best][r])];
        bool* dst = out + origin + r * cols;
        for (int64_t j = 0; j < m; ++j) dst[j] = ((keep >> j) & 1u) != 0;
      }
    }
  });
  return mask.to(w.device());
}

}  // namespace coppice
