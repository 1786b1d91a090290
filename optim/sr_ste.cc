#include "optim/sr_ste.h"

#include <cmath>
#include <optional>
#include <utility>

#include "autograd/functions/straight_through.h"
#include "optim/finite_check.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/nm.h"
#include "sparse/nm_transposable.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// The positions an n:m tensor stores (explicit zeros included), as a bool mask.
Tensor stored_mask(const Tensor& pattern) {
  return ne(to_dense(with_values(pattern, ones_like(values(pattern)))), 0.0);
}

}  // namespace

void validate(const SrSteConfig& c) {
  COPPICE_CHECK(c.interval >= 1, "sr_ste: interval must be >= 1, got ", c.interval);
  COPPICE_CHECK(std::isfinite(c.decay) && c.decay >= 0.0, "sr_ste: decay must be finite and >= 0, got ", c.decay);
}

// ---- NmProjection -----------------------------------------------------------

NmProjection::NmProjection(const Tensor& weight, int64_t n, int64_t m, bool transposable, std::string format)
    : n_(n), m_(m), transposable_(transposable), format_(std::move(format)) {
  COPPICE_CHECK(weight.defined() && weight.is_dense() && is_floating(weight.dtype()),
                "sr_ste: a layer's weight must be a dense floating tensor, got ",
                weight.defined() ? str_cat("format '", weight.format(), "' ", dtype_name(weight.dtype()))
                                 : std::string("an undefined tensor"));
  check_nm_shape(weight.shape(), n, m, "sr_ste");
  if (format_ != "nm") {
    const std::optional<NmGroups> groups = format_nm_groups(format_spec(format_, "sr_ste"), FormatOptions{});
    COPPICE_CHECK(groups && groups->n == n && groups->m == m, "sr_ste: format '", format_, "' ",
                  groups ? str_cat("groups ", groups->n, ":", groups->m) : std::string("has no n:m groups"),
                  "; the projection keeps ", n, ":", m);
  }
  COPPICE_CHECK(!transposable || (m <= kMaxTransposableM && weight.dim() == 2 && weight.size(0) % m == 0),
                "sr_ste: a transposable mask needs m <= ", kMaxTransposableM,
                " and a 2-D weight whose both dims m divides, got m = ", m, " and shape ",
                shape_to_string(weight.shape()));
  refresh(weight);
}

void NmProjection::take(const Tensor& selection) {
  mask_ = stored_mask(selection);
  // A user's format is built from the mask, which holds n per group exactly
  // (through COO an explicit zero of W would not be told from padding).
  pattern_ = format_ == "nm" ? selection : sparse_from_mask(to_dense(selection), mask_, format_);
}

int64_t NmProjection::refresh(const Tensor& weight) {
  COPPICE_CHECK(weight.is_dense() && (!pattern_.defined() || weight.shape() == pattern_.shape()),
                "sr_ste: refresh needs the layer's dense weight of shape ",
                pattern_.defined() ? shape_to_string(pattern_.shape()) : shape_to_string(weight.shape()), ", got ",
                weight.format(), " ", shape_to_string(weight.shape()));
  // The selection ranks by |weight|: an inf or a NaN is refused. The check
  // rides on the one host read a refresh makes anyway (the count below).
  constexpr std::string_view kRefused = "sr_ste: refresh";
  NonfiniteFlag weight_flag;
  weight_flag.add(weight);
  Tensor next =
      transposable_ ? nm_compress(weight, transposable_nm_mask(weight, n_, m_), n_, m_) : nm_compress(weight, n_, m_);
  if (!pattern_.defined()) {
    if (!weight_flag.all_finite()) check_finite_scores(weight, kRefused, "the weight");
    take(next);
    return 0;
  }
  const Tensor next_mask = stored_mask(next);  // take's, made here first for the count
  // Each group keeps n before and after: as many positions enter as leave.
  const Tensor left_and_flag =
      cat({sum(gt(mask_.to(DType::kF32), next_mask.to(DType::kF32))).to(DType::kF64).reshape({1}),
           weight_flag.value().to(DType::kF64).reshape({1})});
  const std::vector<double> read = left_and_flag.to(Device::cpu()).to_vector<double>();
  if (read[1] != 0.0) check_finite_scores(weight, kRefused, "the weight");
  const int64_t left = static_cast<int64_t>(read[0]);
  if (left == 0) return 0;  // the same mask: the old pattern (and its version) stays
  take(next);
  return left;
}

Variable NmProjection::project(const Variable& weight) const { return straight_through(weight, pattern_); }

Tensor NmProjection::decay_term(const Tensor& weight, double decay, double scale) const {
  return mul(where(mask_, zeros_like(weight), weight), decay * scale);
}

void NmProjection::check_mask(const Tensor& mask, const std::string& what) const {
  COPPICE_CHECK(mask.defined() && mask.is_dense() && mask.dtype() == DType::kBool && mask.shape() == mask_.shape(),
                what, " must be a bool tensor of shape ", shape_to_string(mask_.shape()));
  const std::vector<int> keep = mask.to(Device::cpu()).contiguous().to_vector<int>();
  const int64_t cols = mask_.shape().back(), groups = static_cast<int64_t>(keep.size()) / m_;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t count = 0;
    for (int64_t j = 0; j < m_; ++j) count += keep[static_cast<size_t>(g * m_ + j)] != 0;
    COPPICE_CHECK(count == n_, what, ": group ", g % (cols / m_), " of row ", g / (cols / m_), " keeps ", count, " of ",
                  m_, ", expected ", n_);
  }
}

void NmProjection::set_mask(const Tensor& mask) {
  check_mask(mask, "sr_ste: mask");
  take(nm_compress(zeros(mask_.shape(), pattern_.options()), mask.to(mask_.device()), n_, m_));
}

// ---- SrSte --------------------------------------------------------------------

SrSte::SrSte(SrSteConfig config) : config_(config) { validate(config_); }

void SrSte::add_layer(const std::string& name, const Tensor& weight, int64_t n, int64_t m, bool transposable,
                      const std::string& format) {
  COPPICE_CHECK(!layers_.count(name), "sr_ste: layer '", name, "' added twice");
  layers_[name] = std::make_shared<NmProjection>(weight, n, m, transposable, format);
  names_.push_back(name);
}

const NmProjection& SrSte::projection(const std::string& name) const {
  auto it = layers_.find(name);
  COPPICE_CHECK(it != layers_.end(), "sr_ste: no layer '", name, "'; layers: ", str_join(names_, ", "));
  return *it->second;
}

NmProjection& SrSte::projection(const std::string& name) {
  return const_cast<NmProjection&>(static_cast<const SrSte&>(*this).projection(name));
}

std::function<Variable(const Variable&)> SrSte::view(const std::string& name) const {
  projection(name);  // throws for an unknown layer
  std::shared_ptr<const NmProjection> p = layers_.at(name);
  return [p](const Variable& weight) { return p->project(weight); };
}

std::map<std::string, Tensor> SrSte::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (const std::string& name : names_) out[name + ".mask"] = projection(name).mask();
  return out;
}

void SrSte::check_state_tensors(const std::map<std::string, Tensor>& state,
                                const std::map<std::string, Tensor>*) const {
  constexpr const char* op = "sr_ste: load_state_tensors";
  for (const auto& [key, t] : state) {
    bool known = false;
    for (const std::string& name : names_) known = known || key == name + ".mask";
    COPPICE_CHECK(known, op, ": entry '", key, "' belongs to no layer; layers: ", str_join(names_, ", "));
  }
  for (const std::string& name : names_) {
    auto it = state.find(name + ".mask");
    COPPICE_CHECK(it != state.end(), op, ": missing '", name, ".mask'");
    projection(name).check_mask(it->second, str_cat(op, ": '", name, ".mask'"));
  }
}

void SrSte::load_state_tensors(const std::map<std::string, Tensor>& state) {
  check_state_tensors(state, nullptr);
  for (const std::string& name : names_) projection(name).set_mask(state.at(name + ".mask"));
}

// ---- the schedule -----------------------------------------------------------------

namespace {

class SrSteSchedule : public MaskSchedule {
 public:
  SrSteSchedule(SrSte& sr_ste, std::shared_ptr<ParameterStore> store) : sr_(sr_ste), store_(std::move(store)) {}

  const std::vector<std::string>& layers() const override { return sr_.layers(); }
  bool needs_dense_gradient(int64_t) const override { return false; }

  // The gradients carry `loss_scale`; so does the term, which the optimizer
  // then divides out with them.
  void before_optimizer_step(double loss_scale) override {
    if (sr_.config().decay == 0.0) return;
    for (const std::string& name : sr_.layers()) {
      const Tensor w = store_->value(name);
      store_->add_to_gradient(name, sr_.projection(name).decay_term(w, sr_.config().decay, loss_scale));
    }
  }

  // The masks are a function of the weights alone: a skipped step left the
  // weights as they were, and recomputing gives the same masks.
  bool changes_masks(int64_t step, bool) const override { return sr_.is_update_step(step); }

  // Layer by layer: a weight that is inf or NaN is refused naming its
  // layer (the layers refreshed before it hold masks of their own weights,
  // which is what they would hold after any refresh).
  MaskUpdateStats update(int64_t step, const std::map<std::string, GrowthSignal>&) override {
    MaskUpdateStats ms;
    ms.step = step;
    for (const std::string& name : sr_.layers()) {
      int64_t moved = 0;
      try {
        moved = sr_.projection(name).refresh(store_->value(name));
      } catch (const NonfiniteError& e) {
        throw NonfiniteError(str_cat("sr_ste (layer ", name, ", step ", step, "): ", e.what()));
      }
      ms.dropped[name] = moved;
      ms.grown[name] = moved;
    }
    return ms;
  }

 private:
  SrSte& sr_;
  std::shared_ptr<ParameterStore> store_;
};

}  // namespace

std::unique_ptr<MaskSchedule> make_sr_ste_schedule(SrSte& sr_ste, std::shared_ptr<ParameterStore> store) {
  return std::make_unique<SrSteSchedule>(sr_ste, std::move(store));
}

}  // namespace coppice
