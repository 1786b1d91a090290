// Prune and regrow (mask_updater.h).
#include "optim/mask_updater.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "optim/finite_check.h"
#include "optim/group_regrow.h"
#include "sparse/bsr.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/mask_ops.h"
#include "tensor/ops.h"

namespace coppice {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Positions of [0, numel) not in `sorted`.
std::vector<int64_t> complement(const std::vector<int64_t>& sorted, int64_t numel) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(numel) - sorted.size());
  size_t j = 0;
  for (int64_t p = 0; p < numel; ++p) {
    if (j < sorted.size() && sorted[j] == p) {
      ++j;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// Splits `total` over layers in proportion to `weights` (equal weights when
// they sum to 0), never above `caps`, largest remainders first (ties to the
// lower layer); the caps must sum to at least `total`.
std::vector<int64_t> apportion(int64_t total, const std::vector<double>& weights, const std::vector<int64_t>& caps) {
  const size_t n = weights.size();
  std::vector<int64_t> out(n, 0);
  std::vector<bool> fixed(n, false);
  int64_t remaining = total;
  while (remaining > 0) {
    double sum = 0.0;
    size_t open = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i]) {
        sum += weights[i];
        ++open;
      }
    }
    if (open == 0) break;
    std::vector<double> share(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i]) share[i] = static_cast<double>(remaining) * (sum > 0.0 ? weights[i] / sum : 1.0 / open);
    }
    bool capped = false;
    for (size_t i = 0; i < n; ++i) {
      if (!fixed[i] && share[i] >= static_cast<double>(caps[i])) {
        out[i] = caps[i];
        fixed[i] = true;
        remaining -= caps[i];
        capped = true;
      }
    }
    if (capped) continue;
    std::vector<std::pair<double, size_t>> rest;
    int64_t given = 0;
    for (size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      out[i] = static_cast<int64_t>(std::floor(share[i]));
      given += out[i];
      rest.emplace_back(share[i] - static_cast<double>(out[i]), i);
    }
    std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t r = 0; given < remaining && r < rest.size(); ++r) {
      if (out[rest[r].second] < caps[rest[r].second]) {
        ++out[rest[r].second];
        ++given;
      }
    }
    remaining = 0;
  }
  return out;
}

// Nothing is ranked by, or rebuilt from, an inf or a NaN: every layer's
// weight, growth signal and momentum are checked before any layer changes,
// with one host read for all of them; only when one fails are the layers
// read one by one, to name the first.
void check_inputs_finite(const std::vector<std::string>& names, const std::map<std::string, LayerInputs>& inputs,
                         int64_t step) {
  NonfiniteFlag all;
  for (const auto& [name, in] : inputs) {
    all.add(in.param);
    all.add(in.growth_signal.tensor());
    all.add(in.momentum);
  }
  if (all.all_finite()) return;
  for (const std::string& name : names) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;
    const std::string op = str_cat("mask update (layer ", name, ", step ", step, ")");
    check_finite_scores(it->second.param, op, "the weight");
    const GrowthSignal& signal = it->second.growth_signal;
    check_finite_scores(signal.tensor(), op, str_cat("the ", growth_signal_kind_name(signal.kind())));
    check_finite_scores(it->second.momentum, op, "the momentum");
  }
}

}  // namespace

DropSchedule parse_drop_schedule(std::string_view name) {
  if (name == "constant") return DropSchedule::kConstant;
  if (name == "cosine") return DropSchedule::kCosine;
  if (name == "linear") return DropSchedule::kLinear;
  fail("mask updater: unknown drop-fraction schedule '", name, "'; known: constant, cosine, linear");
}

const char* drop_schedule_name(DropSchedule s) {
  switch (s) {
    case DropSchedule::kConstant: return "constant";
    case DropSchedule::kCosine: return "cosine";
    default: return "linear";
  }
}

void validate(const MaskUpdaterConfig& c) {
  COPPICE_CHECK(c.drop_fraction >= 0.0 && c.drop_fraction <= 1.0, "mask updater: drop_fraction must be in [0, 1], got ",
                c.drop_fraction);
  COPPICE_CHECK(c.start_step >= 0, "mask updater: start_step must be >= 0, got ", c.start_step);
  COPPICE_CHECK(c.end_step >= c.start_step, "mask updater: end_step (", c.end_step, ") is before start_step (",
                c.start_step, ")");
  COPPICE_CHECK(c.interval >= 1, "mask updater: interval must be >= 1, got ", c.interval);
  COPPICE_CHECK(c.prune != PruneCriterion::kCustom || c.prune_score != nullptr,
                "mask updater: prune criterion 'custom' needs a prune_score callback");
  COPPICE_CHECK(is_growth_policy_registered(c.growth), "mask updater: unknown growth policy '", c.growth,
                "'; known: ", str_join(registered_growth_policies(), ", "));
}

double drop_fraction_at(const MaskUpdaterConfig& c, int64_t step) {
  if (step < c.start_step || step >= c.end_step) return 0.0;
  const double t = static_cast<double>(step - c.start_step) / static_cast<double>(c.end_step - c.start_step);
  switch (c.schedule) {
    case DropSchedule::kConstant: return c.drop_fraction;
    case DropSchedule::kCosine: return c.drop_fraction / 2.0 * (1.0 + std::cos(t * kPi));
    default: return c.drop_fraction * (1.0 - t);
  }
}

MaskUpdater::MaskUpdater(MaskUpdaterConfig config) : config_(std::move(config)) {
  validate(config_);
  policy_ = make_growth_policy(config_.growth);
}

void MaskUpdater::add_layer(const std::string& name, const Tensor& param) {
  COPPICE_CHECK(!name.empty(), "mask updater: a layer needs a name");
  COPPICE_CHECK(layers_.count(name) == 0, "mask updater: layer '", name, "' is already added");
  const std::string op = str_cat("mask updater (layer ", name, ")");
  Layer l;
  l.shape = param.shape();
  if (is_blocked_bsr(param)) {
    const BsrImpl& b = bsr_impl(param, op);
    l.unit_rows = b.block_rows();
    l.unit_cols = b.block_cols();
    l.ever.assign(static_cast<size_t>(param.numel() / (l.unit_rows * l.unit_cols)), 0);
    mark_ever(l, bsr_block_view(param, op).positions);
  } else {
    l.ever.assign(static_cast<size_t>(param.numel()), 0);
    mark_ever(l, pattern_view(param, op).positions);
  }
  names_.push_back(name);
  layers_.emplace(name, std::move(l));
}

const MaskUpdater::Layer& MaskUpdater::layer(const std::string& name) const {
  auto it = layers_.find(name);
  COPPICE_CHECK(it != layers_.end(), "mask updater: unknown layer '", name, "'; known: ", str_join(names_, ", "));
  return it->second;
}

MaskUpdater::Layer& MaskUpdater::layer(const std::string& name) {
  return const_cast<Layer&>(static_cast<const MaskUpdater*>(this)->layer(name));
}

void MaskUpdater::mark_ever(Layer& l, const std::vector<int64_t>& positions) {
  for (int64_t p : positions) {
    uint8_t& e = l.ever[static_cast<size_t>(p)];
    if (!e) {
      e = 1;
      ++l.ever_count;
    }
  }
}

size_t MaskUpdater::unit_of(const Layer& l, int64_t position) {
  if (l.unit_rows == 1 && l.unit_cols == 1) return static_cast<size_t>(position);
  const int64_t cols = l.shape[1], r = position / cols, c = position % cols;
  return static_cast<size_t>((r / l.unit_rows) * (cols / l.unit_cols) + c / l.unit_cols);
}

double MaskUpdater::itop_rate(const std::string& name) const {
  const Layer& l = layer(name);
  return l.ever.empty() ? 1.0 : static_cast<double>(l.ever_count) / static_cast<double>(l.ever.size());
}

std::map<std::string, Tensor> MaskUpdater::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (const std::string& name : names_) {
    const Layer& l = layer(name);
    Tensor ever = Tensor::empty(l.shape, TensorOptions(DType::kBool, Device::cpu()));
    bool* e = ever.data<bool>();
    for (int64_t i = 0; i < ever.numel(); ++i) e[i] = l.ever[unit_of(l, i)] != 0;
    out[name + ".ever_active"] = ever;
    if (l.movement.scores().defined()) {
      out[name + ".movement_scores"] = l.movement.scores();
      out[name + ".movement_steps"] = scalar_tensor(static_cast<double>(l.movement.steps()), DType::kI64);
    }
  }
  return out;
}

void MaskUpdater::check_state_tensors(const std::map<std::string, Tensor>& state,
                                      const std::map<std::string, Tensor>* params) const {
  constexpr const char* op = "mask updater: load_state_tensors";
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const std::string& name : names_) {
      known =
          known || key == name + ".ever_active" || key == name + ".movement_scores" || key == name + ".movement_steps";
    }
    COPPICE_CHECK(known, op, ": entry '", key, "' belongs to no layer; layers: ", str_join(names_, ", "));
    COPPICE_CHECK(t.defined() && t.is_dense(), op, ": entry '", key, "' must be a dense tensor");
  }
  for (const std::string& name : names_) {
    const Layer& l = layer(name);
    auto it = state.find(name + ".ever_active");
    COPPICE_CHECK(it != state.end(), op, ": missing '", name, ".ever_active'");
    COPPICE_CHECK(it->second.dtype() == DType::kBool && it->second.shape() == l.shape, op, ": '", name,
                  ".ever_active' must be bool of shape ", shape_to_string(l.shape));
    auto scores = state.find(name + ".movement_scores");
    auto steps = state.find(name + ".movement_steps");
    COPPICE_CHECK((scores == state.end()) == (steps == state.end()), op, ": '", name,
                  ".movement_scores' and '.movement_steps' come together");
    if (scores == state.end()) continue;
    const Tensor& sc = scores->second;
    COPPICE_CHECK(sc.dim() == 1 && is_floating(sc.dtype()), op, ": '", name,
                  ".movement_scores' must be 1-D floating, got ", dtype_name(sc.dtype()), " ",
                  shape_to_string(sc.shape()));
    if (params != nullptr) {
      auto p = params->find(name);
      if (p != params->end()) {
        const int64_t slots = values(p->second).numel();
        COPPICE_CHECK(sc.numel() == slots, op, ": '", name, ".movement_scores' has ", sc.numel(),
                      " entries, the layer's parameter stores ", slots);
      }
    }
    const Tensor& st = steps->second;
    COPPICE_CHECK(st.numel() == 1 && st.dtype() == DType::kI64 && st.item() >= 0, op, ": '", name,
                  ".movement_steps' must be one i64 >= 0");
  }
}

void MaskUpdater::load_state_tensors(const std::map<std::string, Tensor>& state) {
  check_state_tensors(state, nullptr);
  for (const std::string& name : names_) {
    Layer& l = layer(name);
    // A unit was stored when any of its entries was.
    const std::vector<int> ever = state.at(name + ".ever_active").to_vector<int>();
    std::fill(l.ever.begin(), l.ever.end(), uint8_t{0});
    for (size_t i = 0; i < ever.size(); ++i) {
      if (ever[i]) l.ever[unit_of(l, static_cast<int64_t>(i))] = 1;
    }
    l.ever_count = std::count(l.ever.begin(), l.ever.end(), uint8_t{1});
    auto scores = state.find(name + ".movement_scores");
    if (scores != state.end()) {
      l.movement.load(scores->second, static_cast<int64_t>(state.at(name + ".movement_steps").item()));
    } else {
      l.movement.reset();
    }
  }
}

bool MaskUpdater::is_update_step(int64_t step) const {
  return step >= config_.start_step && step < config_.end_step && (step - config_.start_step) % config_.interval == 0;
}

bool MaskUpdater::needs_dense_gradient(int64_t step) const {
  return is_update_step(step) && policy_->needs_dense_gradient();
}

bool MaskUpdater::needs_momentum(int64_t step) const { return is_update_step(step) && policy_->needs_momentum(); }

void MaskUpdater::accumulate_movement(const std::string& name, const Tensor& param, const Tensor& grad) {
  layer(name).movement.accumulate(param, grad);
}

MaskUpdateResult MaskUpdater::update(int64_t step, const std::map<std::string, LayerInputs>& inputs) {
  MaskUpdateResult result;
  result.step = step;
  result.updated = is_update_step(step);
  result.drop_fraction = drop_fraction_at(config_, step);

  struct Pending {
    const LayerInputs* in = nullptr;
    PatternView elements;                   // the stored entries
    PatternView view;                       // the units of the update: the entries, or the blocks of a block format
    bool bsr = false;                       // BSR with blocks above 1x1: walked block by block (elements: shape only)
    std::optional<NmGroups> groups;         // n:m: the format's groups, regrown within (group_regrow.h)
    Tensor keys;                            // nm: the prune keys, one per value slot
    bool magnitude = false;                 // nm: keys ranked by |key|
    std::vector<int64_t> kept, candidates;  // in units
    int64_t dropped = 0, grow = 0;
    GrowthSignal signal;  // as the policy ranks it: block scores for a blocked layer
  };
  std::vector<Pending> pending(names_.size());
  for (const auto& [name, unused] : inputs) {
    COPPICE_CHECK(layers_.count(name), "mask update (step ", step, "): inputs for '", name,
                  "', which is no layer; layers: ", str_join(names_, ", "));
  }
  if (result.updated) check_inputs_finite(names_, inputs, step);

  // Prune each layer.
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::string& name = names_[i];
    const std::string op = str_cat("mask update (layer ", name, ", step ", step, ")");
    auto it = inputs.find(name);
    COPPICE_CHECK(it != inputs.end(), op, ": no inputs for the layer");
    const LayerInputs& in = it->second;
    Layer& l = layer(name);
    COPPICE_CHECK(in.param.defined() && in.param.shape() == l.shape, op, ": the parameter must have shape ",
                  shape_to_string(l.shape),
                  in.param.defined() ? str_cat(", got ", shape_to_string(in.param.shape())) : ", got none");
    Pending& p = pending[i];
    p.in = &in;
    if (!result.updated) continue;  // statistics only: no pattern walk on ordinary steps
    p.bsr = is_blocked_bsr(in.param);
    p.groups = nm_groups_of(in.param);
    COPPICE_CHECK(!p.groups || !policy_->redistributes_by_momentum(), op, ": growth '", policy_->name(),
                  "' moves entries between layers, which an n:m layer cannot take (each group keeps its n)");
    if (p.bsr) {
      // Block by block from the block indices: a 4096² weight has 16M entries but 16K blocks.
      const BsrImpl& b = bsr_impl(in.param, op);
      p.elements.shape = l.shape;
      p.elements.block_rows = b.block_rows();
      p.elements.block_cols = b.block_cols();
      p.view = bsr_block_view(in.param, op);
    } else {
      p.elements = pattern_view(in.param, op);
      p.view = p.elements.blocked() ? block_view(p.elements) : p.elements;
    }
    const bool blocked = p.elements.blocked();
    COPPICE_CHECK(!blocked || config_.prune == PruneCriterion::kMagnitude, op, ": prune criterion '",
                  prune_criterion_name(config_.prune), "' works entry by entry; a ", in.param.format(),
                  " parameter is pruned by block magnitude only");
    COPPICE_CHECK(!blocked || !policy_->redistributes_by_momentum(), op, ": growth '", policy_->name(),
                  "' moves entries between layers and needs element formats, got ", in.param.format());
    p.signal = in.growth_signal;
    if (blocked && p.signal.is_dense_gradient() && p.signal.tensor().shape() == l.shape) {
      // A blocked layer ranks blocks by the sum of squares of the gradient
      // over each, the block scores the dense-gradient view forms itself.
      const int64_t bh = p.elements.block_rows, bw = p.elements.block_cols;
      p.signal = GrowthSignal::block_scores(
          sparsify::block_scores(to_dense(p.signal.tensor()).contiguous(), bh, bw, false, op), bh, bw);
    }
    if (policy_->needs_dense_gradient()) {
      // Checked here, before any layer changes, not first by the policy.
      const std::string what =
          blocked ? str_cat(" (a ", in.param.format(), " layer of ", p.elements.block_rows, "x", p.elements.block_cols,
                            " blocks; its dense gradient of shape ", shape_to_string(l.shape), " is summed by block)")
                  : std::string();
      expect_growth_scores(p.signal, l.shape, p.elements.block_rows, p.elements.block_cols,
                           str_cat(op, ": growth '", policy_->name(), "'", what));
    }
    if (policy_->needs_momentum()) {
      COPPICE_CHECK(in.momentum.defined() && in.momentum.shape() == l.shape, op, ": growth '", policy_->name(),
                    "' needs the momentum of shape ", shape_to_string(l.shape));
    }
    const int64_t n = p.view.nnz(), numel = p.view.numel();
    int64_t k = std::llround(result.drop_fraction * static_cast<double>(n));
    if (!config_.allow_regrow_dropped) k = std::min(k, numel - n);
    Tensor keys;
    bool magnitude = false;
    switch (config_.prune) {
      case PruneCriterion::kMagnitude:
        if (p.bsr) {
          keys = stored_block_scores(in.param, op);
        } else if (blocked) {
          keys = sparsify::block_scores(to_dense(in.param).contiguous(), p.elements.block_rows, p.elements.block_cols,
                                        false, op);
        } else {
          keys = values(in.param);
          magnitude = true;
        }
        break;
      case PruneCriterion::kMovement:
        COPPICE_CHECK(l.movement.scores().defined(), op,
                      ": prune criterion 'movement' has no scores; call accumulate_movement on the steps before");
        COPPICE_CHECK(l.movement.pattern_version() == 0 || l.movement.pattern_version() == pattern_version(in.param),
                      op,
                      ": the movement scores belong to another pattern than the parameter's (hand in the "
                      "parameter this updater returned last)");
        keys = l.movement.scores();
        break;
      case PruneCriterion::kCustom: keys = config_.prune_score(in.param, step); break;
    }
    if (p.groups) {
      // Which entries go, and what grows, is decided group by group below;
      // the keys are checked now, before any layer changes.
      check_finite_scores(keys, op, "the prune keys");
      p.keys = keys;
      p.magnitude = magnitude;
      p.dropped = p.grow = k;
      continue;
    }
    p.kept = select_survivors(keys, p.view, n - k, magnitude, op);
    p.dropped = k;
    p.candidates = complement(config_.allow_regrow_dropped ? p.kept : p.view.positions, numel);
    p.grow = k;
  }

  // SNFS: the regrowth moves between layers by mean |momentum| over stored entries.
  if (result.updated && policy_->redistributes_by_momentum() && names_.size() > 1) {
    int64_t total = 0;
    std::vector<double> weights(names_.size());
    std::vector<int64_t> caps(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      const Pending& p = pending[i];
      total += p.dropped;
      caps[i] = static_cast<int64_t>(p.candidates.size());
      if (p.view.nnz() > 0) {
        const Tensor m = to_dense(p.in->momentum).contiguous().reshape({-1});
        const Tensor at = index_select(m, 0, from_vector(p.view.positions).to(m.device()));
        weights[i] = mean(abs(at.to(DType::kF64))).item();
      }
    }
    const std::vector<int64_t> grow = apportion(total, weights, caps);
    for (size_t i = 0; i < names_.size(); ++i) pending[i].grow = grow[i];
  }

  // Grow and rebuild.
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::string& name = names_[i];
    Pending& p = pending[i];
    Layer& l = layer(name);
    LayerUpdate u;
    u.name = name;
    u.param = p.in->param;
    if (result.updated && (p.dropped > 0 || p.grow > 0)) {
      const std::string op = str_cat("mask update (layer ", name, ", step ", step, ")");
      GrowthInput g;
      g.layer = name;
      g.param = p.in->param;
      g.step = step;
      g.k = p.grow;
      g.candidates = &p.candidates;
      g.growth_signal = p.signal;
      g.momentum = p.in->momentum;
      if (p.elements.blocked()) {
        g.block_rows = p.elements.block_rows;
        g.block_cols = p.elements.block_cols;
        // The momentum's block sums of squares, unless it came as the grid already.
        if (g.momentum.defined() && g.momentum.shape() != p.view.shape) {
          g.momentum = sparsify::block_scores(to_dense(g.momentum).contiguous(), g.block_rows, g.block_cols, false, op);
        }
      }
      g.seed = config_.seed;
      g.purpose = name_purpose(name);
      g.rank = config_.rank;
      MaskChange change;
      int64_t area = 1;  // a BSR change names blocks (the layer's ITOP units); others name entries
      if (p.groups) {
        const Tensor scores = policy_->group_scores(g);
        COPPICE_CHECK(scores.defined(), op, ": growth '", policy_->name(),
                      "' cannot grow inside n:m groups (it gives no group_scores); random, gradient and momentum can");
        const GroupRegrow r = regrow_within_groups(p.view, p.keys, p.magnitude, p.dropped, p.groups->m, scores,
                                                   config_.allow_regrow_dropped, op);
        // nm's own rebuild builds its indices group by group; a user's n:m format is rebuilt from positions.
        change = p.in->param.layout() == Layout::kNm
                     ? rebuild_nm(p.in->param, p.view, r.kept, r.grown, config_.init, op)
                     : rebuild_pattern(p.in->param, p.view, r.kept, r.grown, config_.init, op);
      } else {
        std::vector<int64_t> grown = p.grow > 0 ? policy_->grow(g) : std::vector<int64_t>{};
        COPPICE_CHECK(static_cast<int64_t>(grown.size()) == p.grow, op, ": growth '", policy_->name(), "' returned ",
                      grown.size(), " positions, expected exactly ", p.grow);
        for (size_t j = 0; j < grown.size(); ++j) {
          COPPICE_CHECK(std::binary_search(p.candidates.begin(), p.candidates.end(), grown[j]), op, ": growth '",
                        policy_->name(), "' returned position ", grown[j], ", which is not a candidate");
          COPPICE_CHECK(j == 0 || grown[j - 1] < grown[j], op, ": growth '", policy_->name(),
                        "' must return distinct ascending positions (", grown[j - 1], " then ", grown[j], ")");
        }
        change = p.bsr                  ? rebuild_bsr_blocks(p.in->param, p.view, p.kept, grown, config_.init, op)
                 : p.elements.blocked() ? rebuild_pattern(p.in->param, p.elements, expand_blocks(p.kept, p.elements),
                                                          expand_blocks(grown, p.elements), config_.init, op)
                                        : rebuild_pattern(p.in->param, p.view, p.kept, grown, config_.init, op);
        if (p.bsr) area = p.elements.block_rows * p.elements.block_cols;
      }
      u.param = change.param;
      u.keep_from = change.keep_from;
      u.changed = true;
      u.dropped = static_cast<int64_t>(change.dropped.size()) * area;
      u.grown = static_cast<int64_t>(change.grown.size()) * area;
      mark_ever(l, change.grown);
      if (l.movement.scores().defined()) l.movement.remap(change.keep_from, pattern_version(change.param));
      if (remap_) remap_(name, change.param, change.keep_from);
    }
    u.nnz = nnz(u.param);
    u.density = density(u.param);
    u.itop_rate = itop_rate(name);
    result.nnz += u.nnz;
    result.numel += u.param.numel();
    result.layers.push_back(std::move(u));
  }
  return result;
}

}  // namespace coppice
