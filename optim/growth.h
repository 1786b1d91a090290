// Growth policies: which inactive positions a mask update activates
// (docs/architecture.md, layer 5: "growth policies (registry)").
//
// Built-ins, by registry name:
//   random    SET (Mocanu et al. 2018): k candidates uniformly at random,
//             drawn from Generator::keyed(seed, purpose, step, rank) with one
//             Philox key per flat position, so that CPU and GPU and every
//             replica given the same key pick the same ones.
//   gradient  RigL (Evci et al. 2020): the k candidates of largest |dense
//             gradient| (for a block format, largest block scores),
//             exact, ties to the lower flat position.
//   momentum  SNFS (Dettmers & Zettlemoyer 2019): the k candidates of largest
//             |momentum| (a dense tensor of the parameter's shape); the
//             updater also redistributes the regrown count across layers in
//             proportion to each layer's mean |momentum| over its stored
//             entries.
// A user adds a policy with register_growth_policy; nothing in the library
// names it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optim/growth_signal.h"
#include "tensor/tensor.h"

namespace coppice {

// What a growth policy sees for one layer at one update.
struct GrowthInput {
  std::string layer;
  Tensor param;  // the parameter before the update
  int64_t step = 0;
  int64_t k = 0;                                     // exactly this many to grow
  const std::vector<int64_t>* candidates = nullptr;  // eligible flat positions, ascending (size >= k)
  // The gradient signal (growth_signal.h), handed in on update steps when the
  // policy asks (needs_dense_gradient), already checked against the layer by
  // the updater: the dense gradient of the parameter's shape for a layer that
  // grows entry by entry, block scores of the grid for one that grows blocks.
  GrowthSignal growth_signal;
  Tensor momentum;
  uint64_t seed = 0, purpose = 0, rank = 0;  // the Philox key (purpose: name_purpose(layer))
  // Block formats (those whose format-table row has a block shape: BSR,
  // Blocked-ELL) grow whole blocks: when either is above 1, candidates and
  // the result index the row-major grid of blocks [rows / block_rows,
  // cols / block_cols], growth_signal holds block scores and momentum is
  // per-block sums of squares of that grid's shape.
  int64_t block_rows = 1, block_cols = 1;

  // The tensor of growth_signal that this layer ranks by (expect_growth_scores
  // in growth_signal.h): throws naming `policy`, the layer, what was expected
  // and what came when the signal is missing or of the other kind.
  const Tensor& growth_scores(std::string_view policy) const;
};

class GrowthPolicy {
 public:
  virtual ~GrowthPolicy() = default;
  virtual std::string name() const = 0;
  // Whether grow() must be handed the gradient signal (GrowthInput::growth_signal;
  // asked only on update steps).
  virtual bool needs_dense_gradient() const { return false; }
  virtual bool needs_momentum() const { return false; }
  // Whether the updater moves regrowth between layers by mean |momentum| (SNFS).
  virtual bool redistributes_by_momentum() const { return false; }
  // Exactly in.k distinct positions out of *in.candidates, ascending.
  virtual std::vector<int64_t> grow(const GrowthInput& in) const = 0;
  // One score per position (dense, the layer's shape; larger grows first),
  // for layers that grow inside groups: an n:m layer regrows in each group
  // as many entries as it dropped there (group_regrow.h), so a global pick
  // of k does not do. Undefined (the default): the policy cannot grow such
  // layers, and the updater says so. The built-ins give |dense gradient|,
  // |momentum| and random's Philox keys.
  virtual Tensor group_scores(const GrowthInput& in) const {
    (void)in;
    return Tensor();
  }
};

using GrowthPolicyPtr = std::shared_ptr<const GrowthPolicy>;
using GrowthPolicyFactory = std::function<GrowthPolicyPtr()>;

// Adds a policy under `name`; throws when the name is empty or taken.
void register_growth_policy(const std::string& name, GrowthPolicyFactory factory);
// The policy `name`; throws naming the known ones when it is unknown.
GrowthPolicyPtr make_growth_policy(const std::string& name);
std::vector<std::string> registered_growth_policies();  // sorted
bool is_growth_policy_registered(const std::string& name);

// Helpers for policies.
// The k candidates of largest |scores| (scores dense of any floating dtype,
// the layer's shape, on any device), exact via sparsify::topk_mask, ties to
// the lower flat position, ascending; NonfiniteError (optim/finite_check.h)
// when a candidate's score is inf or NaN.
std::vector<int64_t> top_k_among(const Tensor& scores, const std::vector<int64_t>& candidates, int64_t k,
                                 const std::string& op);
// k candidates uniformly without replacement: those whose Philox keys (53
// bits from block(seed', offset', position) of Generator::keyed(seed,
// purpose, step, rank)) are largest, ascending. Computed on the host; the
// draw depends only on the key and the positions.
std::vector<int64_t> random_k_among(const std::vector<int64_t>& candidates, int64_t k, uint64_t seed, uint64_t purpose,
                                    uint64_t step, uint64_t rank);
// The keys random_k_among ranks by, for every position of `shape` (f64 in
// [0, 1), a CPU tensor of that shape).
Tensor random_keys(const Shape& shape, uint64_t seed, uint64_t purpose, uint64_t step, uint64_t rank);

// An initial mask for sparse training from scratch: exactly `nnz` of
// shape's positions, uniformly at random, Philox-keyed like random growth
// (seed, purpose, step 0, rank 0): every replica and device gets the same.
// A bool CPU tensor; with layer_densities (density.h) and sparse_from_mask it
// makes a model's initial sparse weights.
Tensor random_mask(const Shape& shape, int64_t nnz, uint64_t seed, uint64_t purpose);

}  // namespace coppice
