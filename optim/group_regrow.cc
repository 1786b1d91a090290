// N:M prune and regrow (group_regrow.h).
#include "optim/group_regrow.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "optim/finite_check.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

// Host f64 copy of a tensor's elements, row-major.
std::vector<double> host_values(const Tensor& t) {
  return to_dense(t).contiguous().to(DType::kF64).to(Device::cpu()).to_vector<double>();
}

}  // namespace

GroupRegrow regrow_within_groups(const PatternView& view, const Tensor& keys, bool magnitude, int64_t k, int64_t m,
                                 const Tensor& scores, bool allow_regrow_dropped, std::string_view op) {
  COPPICE_CHECK(m >= 1 && !view.shape.empty() && view.shape.back() % m == 0, op, ": groups of ", m,
                " do not tile rows of ", shape_to_string(view.shape));
  const int64_t numel = view.numel(), groups = numel / m;
  const size_t stored = view.positions.size();
  COPPICE_CHECK(groups == 0 || static_cast<int64_t>(stored) % groups == 0, op, ": ", stored, " stored entries in ",
                groups, " groups of ", m, " is not the same count per group");
  const int64_t n = groups == 0 ? 0 : static_cast<int64_t>(stored) / groups;
  COPPICE_CHECK(keys.numel() == view.value_slots, op, ": ", keys.numel(), " keys for ", view.value_slots,
                " value slots");
  COPPICE_CHECK(scores.defined() && scores.shape() == view.shape, op, ": growth scores must have shape ",
                shape_to_string(view.shape),
                scores.defined() ? str_cat(", got ", shape_to_string(scores.shape())) : ", got none");
  check_finite_scores(keys, op, "the prune keys");
  check_finite_scores(scores, op, "the growth scores");
  std::vector<int64_t> per_group(static_cast<size_t>(groups), 0);
  for (int64_t p : view.positions) ++per_group[static_cast<size_t>(p / m)];
  for (int64_t g = 0; g < groups; ++g) {
    COPPICE_CHECK(per_group[static_cast<size_t>(g)] == n, op, ": group ", g, " (row ", g * m / view.shape.back(),
                  ") stores ", per_group[static_cast<size_t>(g)], " entries, the others ", n);
  }

  // Drop: stored entries by (key, position), ascending, while their group
  // may lose more. Where the cap cannot bind (it is n), the k smallest are
  // found by selection, not a sort.
  const std::vector<double> key = host_values(keys);
  std::vector<double> rank_key(stored);
  for (size_t i = 0; i < stored; ++i) {
    const double v = key[static_cast<size_t>(view.slots[i])];
    rank_key[i] = magnitude ? std::abs(v) : v;
  }
  auto before = [&](size_t a, size_t b) {
    const double ka = rank_key[a], kb = rank_key[b];
    if (std::isnan(ka) || std::isnan(kb)) return std::isnan(kb) && (!std::isnan(ka) || a < b);  // (refused above)
    return ka < kb || (ka == kb && a < b);
  };
  const int64_t cap = allow_regrow_dropped ? n : std::min(n, m - n);
  std::vector<int64_t> dropped_in(static_cast<size_t>(groups), 0);
  std::vector<bool> drop(stored, false);
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(stored)));
  std::vector<size_t> order(stored);
  std::iota(order.begin(), order.end(), size_t{0});
  if (cap >= n) {
    if (want > 0 && want < stored) std::nth_element(order.begin(), order.begin() + want, order.end(), before);
    for (size_t j = 0; j < want; ++j) {
      drop[order[j]] = true;
      ++dropped_in[static_cast<size_t>(view.positions[order[j]] / m)];
    }
  } else {
    std::sort(order.begin(), order.end(), before);
    size_t left = want;
    for (size_t j = 0; j < stored && left > 0; ++j) {
      int64_t& d = dropped_in[static_cast<size_t>(view.positions[order[j]] / m)];
      if (d < cap) {
        ++d;
        drop[order[j]] = true;
        --left;
      }
    }
  }

  GroupRegrow out;
  std::vector<bool> was_stored(static_cast<size_t>(numel), false), was_dropped(static_cast<size_t>(numel), false);
  for (size_t i = 0; i < stored; ++i) {
    was_stored[static_cast<size_t>(view.positions[i])] = true;
    if (drop[i]) {
      was_dropped[static_cast<size_t>(view.positions[i])] = true;
    } else {
      out.kept.push_back(view.positions[i]);
    }
  }

  // Grow: in each group that dropped, its best candidates by score.
  const std::vector<double> score = host_values(scores);
  std::vector<int64_t> candidates;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t want = dropped_in[static_cast<size_t>(g)];
    if (want == 0) continue;
    candidates.clear();
    for (int64_t p = g * m; p < (g + 1) * m; ++p) {
      const bool kept = was_stored[static_cast<size_t>(p)] && !was_dropped[static_cast<size_t>(p)];
      if (!kept && (allow_regrow_dropped || !was_dropped[static_cast<size_t>(p)])) candidates.push_back(p);
    }
    // (NaN cannot reach here, refused above; the order is still total.)
    std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
      const double sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
      if (std::isnan(sa) || std::isnan(sb)) return std::isnan(sa) && !std::isnan(sb);
      return sa > sb;
    });
    COPPICE_CHECK(static_cast<int64_t>(candidates.size()) >= want, op, ": group ", g, " dropped ", want,
                  " entries but has ", candidates.size(), " candidates");
    out.grown.insert(out.grown.end(), candidates.begin(), candidates.begin() + want);
  }
  std::sort(out.grown.begin(), out.grown.end());
  return out;
}

}  // namespace coppice
