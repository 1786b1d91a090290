// SR-STE (Zhou et al. 2021, "Learning N:M Fine-grained Structured Sparse
// Neural Networks From Scratch"): n:m weights trained from dense ones by a
// sparse-refined straight-through estimator.
//
// A layer keeps its dense weight W, which the optimizer updates at every
// position, and forward sees W through its n:m projection P: in every group
// of m consecutive entries of a row (the nm format's groups), the n of
// largest |W|, chosen as nm_compress does (ties to the lower index; a W
// holding an inf or a NaN is refused, never ranked), or with `transposable`
// the mask of transposable_nm_mask (n:m along the columns too). P is an nm
// tensor (or of a user's format declared with the same groups), so the
// layer's products run on the n:m kernels; its values are W's, read at every forward, and its mask is
// recomputed from W every `interval` steps and cached between.
//
// Backward is straight-through (autograd/functions/straight_through.h): W
// gets the gradient with respect to P as if P were dense (g^T x at every
// position for a linear layer). Before the optimizer step the schedule adds
// the sparse-refined term, so that the optimizer sees
//   dL/dP (dense) + decay * (1 - mask) * W
// and applies its own weight decay on top, as for any weight; decay 0 is the
// plain STE. The term is added after the gradients are reduced over ranks
// and carries the loss scale they carry, so it is exact whatever the scale.
//
// The masks are the method's state in checkpoints (MaskState: between two
// recomputations they come from an earlier W than the one saved).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/mask_schedule.h"
#include "optim/mask_state.h"
#include "optim/parameter_store.h"
#include "tensor/tensor.h"

namespace coppice {

struct SrSteConfig {
  int64_t interval = 1;  // steps between mask recomputations, >= 1 (1: every step, as in the paper)
  double decay = 2e-4;   // lambda of the sparse-refined term, finite and >= 0 (the paper's lambda_W)
};

// Throws coppice::Error naming the bad field.
void validate(const SrSteConfig& config);

// One weight's n:m mask and the projection through it; shared by SrSte and
// the view a module holds (so that a trained model keeps its projection).
class NmProjection {
 public:
  // The first mask, from `weight` (dense, at least 1-D, m dividing its last
  // dim; 2-D with m dividing both dims when transposable). The projection is
  // a tensor of `format`: nm, or a user's format whose groups
  // (FormatSpec::nm_groups) are n:m.
  NmProjection(const Tensor& weight, int64_t n, int64_t m, bool transposable, std::string format = "nm");

  // Recomputes the mask from `weight`; returns how many positions left it
  // (as many entered). An unchanged mask keeps its pattern version. Throws
  // NonfiniteError (optim/finite_check.h), the mask unchanged, when the
  // weight holds an inf or a NaN (the constructor too).
  int64_t refresh(const Tensor& weight);
  // `weight` seen through the mask: an nm Variable holding weight's values
  // at the mask's positions, whose gradient reaches `weight` straight through.
  Variable project(const Variable& weight) const;
  // The sparse-refined term decay * scale * (1 - mask) * weight (dense,
  // weight's shape; exactly zero at the kept positions).
  Tensor decay_term(const Tensor& weight, double decay, double scale) const;

  const Tensor& pattern() const {
    return pattern_;
  }                                             // in format(); its values are stale (the weight's at the last refresh)
  const Tensor& mask() const { return mask_; }  // bool, the weight's shape and device
  // Throws naming `what` unless `mask` is bool of the weight's shape with n of every m in each group.
  void check_mask(const Tensor& mask, const std::string& what) const;
  // Replaces the mask (a checkpoint's), checked as check_mask does.
  void set_mask(const Tensor& mask);

  int64_t n() const { return n_; }
  int64_t m() const { return m_; }
  bool transposable() const { return transposable_; }
  const std::string& format() const { return format_; }

 private:
  // Keeps `selection` (nm, the selection made) as the pattern, in format_.
  void take(const Tensor& selection);

  int64_t n_, m_;
  bool transposable_;
  std::string format_;
  Tensor pattern_;
  Tensor mask_;
};

class SrSte : public MaskState {
 public:
  explicit SrSte(SrSteConfig config);

  // Registers the dense weight `name` (its current value) with its n:m
  // grouping and computes its first mask; forward sees it in `format` (nm,
  // or a user's n:m format: NmProjection).
  void add_layer(const std::string& name, const Tensor& weight, int64_t n, int64_t m, bool transposable = false,
                 const std::string& format = "nm");
  const std::vector<std::string>& layers() const { return names_; }
  const SrSteConfig& config() const { return config_; }

  // What forward should see of the layer's weight (a Module's ParameterView,
  // models/module.h): its projection. The view keeps the layer's projection
  // alive.
  std::function<Variable(const Variable&)> view(const std::string& name) const;
  const NmProjection& projection(const std::string& name) const;
  NmProjection& projection(const std::string& name);

  // Whether the masks are recomputed after the optimizer step of `step`
  // ((step + 1) % interval == 0): step t's forward uses the mask of W as it
  // stood at the start of step interval * floor(t / interval).
  bool is_update_step(int64_t step) const { return (step + 1) % config_.interval == 0; }

  // MaskState: per layer "<name>.mask" (bool, the weight's shape).
  std::map<std::string, Tensor> state_tensors() const override;
  void check_state_tensors(const std::map<std::string, Tensor>& state,
                           const std::map<std::string, Tensor>* params) const override;
  void load_state_tensors(const std::map<std::string, Tensor>& state) override;

 private:
  SrSteConfig config_;
  std::vector<std::string> names_;
  std::map<std::string, std::shared_ptr<NmProjection>> layers_;
};

// The schedule of `sr_ste` over the weights of `store` (each layer a dense
// parameter of that name): before every optimizer step taken, the
// sparse-refined term added to each weight's gradient (times the loss
// scale); after the optimizer step of every update step, the masks
// recomputed from the weights (dropped and grown: the positions that left
// and entered each mask). No dense-gradient steps: the gradient is dense.
std::unique_ptr<MaskSchedule> make_sr_ste_schedule(SrSte& sr_ste, std::shared_ptr<ParameterStore> store);

}  // namespace coppice
