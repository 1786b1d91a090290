// Prune and regrow (docs/architecture.md, layer 5: "mask updates"): every
// `interval` steps between `start_step` and `end_step`, each layer drops
// k = round(f(step) * nnz) of its stored entries (f: the drop-fraction
// schedule) by a prune criterion (prune.h) and grows
// exactly as many inactive positions back by a growth policy (growth.h), so
// that its nnz, and so its density, is the same after every update (SNFS's
// momentum policy moves regrowth between layers instead; the total nnz is
// still kept).
//
// The updater decides on positions and rebuilds each parameter in its own
// format (mask_change.h): survivors keep their values bit for bit, grown
// entries start at zero (or at config.init). It knows nothing of optimizers
// or communicators: its output per layer is the new parameter and
// `keep_from` (each new slot's old slot, or -1), which it also hands to the
// optional StateRemapFn that the trainer wires to the optimizer's
// remap_state. Its inputs are plain tensors, which the trainer reduces
// across ranks before handing them in, so replicas compute the same masks.
//
// The gradient signal (growth_signal.h: the dense gradient, or a block
// format's block scores) is needed only on update steps, and only when the
// growth policy asks (needs_dense_gradient(step)); on every other step the
// trainer keeps the compact gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "optim/growth.h"
#include "optim/mask_change.h"
#include "optim/mask_state.h"
#include "optim/prune.h"
#include "tensor/tensor.h"

namespace coppice {

enum class DropSchedule {
  kConstant,  // f(t) = alpha
  kCosine,    // f(t) = alpha / 2 (1 + cos(pi (t - start) / (end - start)))   (RigL)
  kLinear,    // f(t) = alpha (1 - (t - start) / (end - start))
};
// Parses "constant", "cosine" or "linear"; throws listing them.
DropSchedule parse_drop_schedule(std::string_view name);
const char* drop_schedule_name(DropSchedule s);

struct MaskUpdaterConfig {
  int64_t start_step = 0;
  int64_t end_step = 0;        // no update at or after it; end_step >= start_step
  int64_t interval = 100;      // an update at start_step + j * interval, j = 0, 1, ...
  double drop_fraction = 0.3;  // alpha, in [0, 1]: the fraction of each layer's nnz dropped
  DropSchedule schedule = DropSchedule::kCosine;
  PruneCriterion prune = PruneCriterion::kMagnitude;
  PruneScoreFn prune_score;       // for PruneCriterion::kCustom
  std::string growth = "random";  // a registered growth policy (growth.h)
  // Whether positions dropped in an update may be grown back in the same
  // one. Without it, a layer drops at most as many as it has inactive
  // positions, so that exactly as many can be grown.
  bool allow_regrow_dropped = false;
  RegrowInit init;  // values of grown entries; empty: zeros
  // The Philox key of random growth: (seed, name_purpose(layer), step,
  // rank). Replicas that must agree pass the same rank (default 0).
  uint64_t seed = 0;
  uint64_t rank = 0;
};

// Throws coppice::Error naming the bad field (drop fraction outside [0, 1],
// end before start, interval < 1, an unknown growth policy (listing the
// known ones), a custom criterion without a callback).
void validate(const MaskUpdaterConfig& config);

// f(step) of config.schedule (0 outside [start, end)).
double drop_fraction_at(const MaskUpdaterConfig& config, int64_t step);

// The inputs of one layer at an update: the parameter (always), and the
// growth signal / momentum when the growth policy asks for them. The signal
// is a dense gradient of the parameter's shape (dense, or in any format whose
// unstored entries read as 0, for example the gradient's top candidates,
// streamed, as COO) or, for a block format, its block scores
// (models/dense_gradient_view.h forms them without a dense gradient); a dense
// gradient of a block-format layer is summed by block here. The momentum is
// the parameter's shape. Replicas hand in the same, already reduced tensors.
struct LayerInputs {
  Tensor param;
  GrowthSignal growth_signal;
  Tensor momentum;
};

struct LayerUpdate {
  std::string name;
  Tensor param;      // the new parameter (the input itself when unchanged)
  Tensor keep_from;  // i64 (MaskChange's), one per slot of values(param); undefined when unchanged
  bool changed = false;
  int64_t dropped = 0;  // entries (a block format counts every entry of its blocks)
  int64_t grown = 0;
  int64_t nnz = 0;
  double density = 0.0;
  double itop_rate = 0.0;  // fraction of positions ever stored since add_layer (in-time over-parameterization)
};

struct MaskUpdateResult {
  int64_t step = 0;
  bool updated = false;  // false on steps that are not update steps (layers then carry only statistics)
  double drop_fraction = 0.0;
  std::vector<LayerUpdate> layers;  // in add_layer order
  int64_t nnz = 0;                  // over every layer
  int64_t numel = 0;                // over every layer
  double density() const { return numel > 0 ? static_cast<double>(nnz) / static_cast<double>(numel) : 1.0; }
};

// Called for each changed layer, after it is rebuilt: the trainer forwards it
// to the optimizer's remap_state(param, keep_from).
using StateRemapFn = std::function<void(const std::string& name, const Tensor& new_param, const Tensor& keep_from)>;

class MaskUpdater : public MaskState {
 public:
  explicit MaskUpdater(MaskUpdaterConfig config);

  // Registers a layer with its initial parameter (a sparse tensor in coo,
  // csr, csc or masked, entry by entry; or a 2-D one in bsr or blocked_ell,
  // whose updates keep, drop and grow whole blocks, ranked by block sum of
  // squares of the weight, gradient or momentum; magnitude pruning only, and
  // no momentum redistribution); the start of its ITOP record. A BSR layer is
  // updated from its block indices and its values block by block, on the
  // parameter's device, without visiting its entries one by one.
  void add_layer(const std::string& name, const Tensor& param);
  const std::vector<std::string>& layers() const { return names_; }

  void set_state_remap(StateRemapFn fn) { remap_ = std::move(fn); }

  bool is_update_step(int64_t step) const;
  // True only on update steps whose growth policy reads the gradient signal
  // (LayerInputs::growth_signal).
  bool needs_dense_gradient(int64_t step) const;
  bool needs_momentum(int64_t step) const;

  // For PruneCriterion::kMovement: adds -w * grad to the layer's compact
  // scores; call on every step with the gradient of the current pattern.
  void accumulate_movement(const std::string& name, const Tensor& param, const Tensor& grad);

  // Runs the update of `step` over every layer (inputs must hold each by
  // name, and nothing else). On other steps it changes nothing and reports
  // statistics. Throws naming the layer, before any layer changes, when the
  // policy needs a growth signal and a layer's is missing or not what the
  // layer grows by (expected vs got); NonfiniteError (optim/finite_check.h)
  // when a weight, a growth signal, a momentum or a prune key is inf or NaN:
  // masks are never ranked by non-finite scores.
  MaskUpdateResult update(int64_t step, const std::map<std::string, LayerInputs>& inputs);

  double itop_rate(const std::string& name) const;

  // The updater's own state, for checkpoints (train/ saves the tensors):
  // per layer "<name>.ever_active" (bool, the layer's shape: the ITOP record)
  // and, once movement scores exist, "<name>.movement_scores" (compact, one
  // per slot of values(param)) and "<name>.movement_steps" (i64 scalar).
  std::map<std::string, Tensor> state_tensors() const override;
  // Restores them into the layers added so far (every layer's ever_active
  // must be there, with its shape); throws naming the first missing or
  // mismatched entry, or an entry for no layer.
  void load_state_tensors(const std::map<std::string, Tensor>& state) override;
  // The checks load_state_tensors makes before it changes anything; with
  // `params` (layer name -> the parameter the layer will hold), also the
  // movement scores' length against its stored values.
  void check_state_tensors(const std::map<std::string, Tensor>& state,
                           const std::map<std::string, Tensor>* params) const override;
  const MaskUpdaterConfig& config() const { return config_; }

 private:
  struct Layer {
    Shape shape;
    // The ITOP record: per unit of the layer, ever stored. A unit is an entry,
    // or for BSR a block (all its entries are stored together), so that an
    // update marks hundreds of blocks, not millions of scattered entries.
    std::vector<uint8_t> ever;  // row-major over the grid of units
    int64_t ever_count = 0;     // units
    int64_t unit_rows = 1, unit_cols = 1;
    MovementScores movement;
  };
  const Layer& layer(const std::string& name) const;
  Layer& layer(const std::string& name);
  // Marks units (flat indices of the grid of units) as ever stored.
  void mark_ever(Layer& l, const std::vector<int64_t>& units);
  // The unit that holds entry `position` of the layer.
  static size_t unit_of(const Layer& l, int64_t position);

  MaskUpdaterConfig config_;
  GrowthPolicyPtr policy_;
  StateRemapFn remap_;
  std::vector<std::string> names_;
  std::map<std::string, Layer> layers_;
};

}  // namespace coppice
