// Growth policies, sparsifiers and prune criteria written in Python, each
// registered by name. Growth policies and sparsifiers go into the library's
// registries (optim/growth.h, sparsifiers/registry.h), so jobs name them as
// they name the built-ins (mask_update.growth, sparsity.rules[].sparsifier).
// The library has no registry of prune criteria (a job's mask_update.prune
// is magnitude or movement), so Python's live here, and coppice.optim's
// MaskUpdater takes them by name as PruneCriterion::kCustom.
//
// Each is called with NumPy arrays: a growth policy with copies of the dense
// weight and gradient (as it always was); a sparsifier and a prune criterion
// with read-only views of the tensors where they are dense CPU tensors
// already, else of dense host copies. The GIL is taken for the call and the
// conversion of its result only; what it returned is checked before the
// library uses it (callback_results.cc: a coppice.Error naming the policy).
// An exception raised in one stops the library call that led there, which
// raises it again with its traceback (python_errors.cc).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "optim/growth.h"
#include "python/bindings.h"
#include "sparse/sparse_impl.h"
#include "sparsifiers/registry.h"
#include "sparsifiers/schedule.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::python {
namespace {

// ---- growth policies ----------------------------------------------------------------------

// fn(layer=, step=, k=, candidates=, weight=, gradient=) -> k positions (any
// order) among `candidates` (flat positions of the weight); the arrays are
// NumPy copies of the dense weight and of the growth signal's tensor (f32):
// the dense gradient, the layer's shape, or for a block-format layer its
// block scores, the block grid's shape (as the candidates then index it).
class PythonGrowth : public GrowthPolicy {
 public:
  PythonGrowth(std::string name, PyRef fn, bool needs_gradient)
      : name_(std::move(name)), fn_(std::move(fn)), needs_gradient_(needs_gradient) {}
  std::string name() const override { return name_; }
  bool needs_dense_gradient() const override { return needs_gradient_; }
  std::vector<int64_t> grow(const GrowthInput& in) const override {
    const Tensor w = to_dense(in.param).to(DType::kF32).to(Device::cpu()).contiguous();
    const Tensor& signal = in.growth_signal.tensor();
    const Tensor g = signal.defined() ? to_dense(signal).to(DType::kF32).to(Device::cpu()).contiguous() : Tensor();
    std::vector<int64_t> out;
    {
      py::gil_scoped_acquire gil;
      try {
        py::array_t<int64_t> cand(static_cast<py::ssize_t>(in.candidates->size()), in.candidates->data());
        py::object gradient = g.defined() ? py::object(to_numpy(g)) : py::none();
        py::object r =
            (*fn_)(py::arg("layer") = in.layer, py::arg("step") = in.step, py::arg("k") = in.k,
                   py::arg("candidates") = cand, py::arg("weight") = to_numpy(w), py::arg("gradient") = gradient);
        out = positions_returned(r, str_cat("growth policy '", name_, "' (Python)"), in.k);
      } catch (py::error_already_set& e) { fail_from_python(str_cat("growth policy '", name_, "'"), e); }
    }
    std::sort(out.begin(), out.end());
    return out;  // the updater checks the count, that they are candidates and distinct
  }

 private:
  std::string name_;
  PyRef fn_;
  bool needs_gradient_;
};

// ---- sparsifiers --------------------------------------------------------------------------

SparsifierKind parse_kind(const std::string& kind) {
  for (SparsifierKind k : {SparsifierKind::kStreaming, SparsifierKind::kMaterializing, SparsifierKind::kBlocking}) {
    if (kind == sparsifier_kind_name(k)) return k;
  }
  fail("register_sparsifier: kind must be streaming, materializing or blocking, got '", kind, "'");
}

// What the factory returned for one spec: keep_mask(x, ctx) -> a bool array
// of x's shape (x a read-only NumPy array, ctx a coppice.SparsifyContext).
class PythonSparsifier : public Sparsifier {
 public:
  PythonSparsifier(std::string description, SparsifierKind kind, PyRef keep)
      : description_(std::move(description)), kind_(kind), keep_(std::move(keep)) {}
  std::string describe() const override { return description_; }
  SparsifierKind kind() const override { return kind_; }

  Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const override {
    const Tensor h = host_float(x);
    Tensor mask;
    {
      py::gil_scoped_acquire gil;
      try {
        const py::object r = (*keep_)(to_numpy_readonly(h), ctx);
        // A copy the library owns, so that no NumPy memory outlives this call unseen.
        mask = mask_returned(r, str_cat("sparsifier ", description_, " (Python): keep_mask"), x.shape());
      } catch (py::error_already_set& e) { fail_from_python(str_cat("sparsifier ", description_), e); }
    }
    return mask.to(x.device());
  }

 private:
  std::string description_;
  SparsifierKind kind_;
  PyRef keep_;
};

// ---- prune criteria -----------------------------------------------------------------------

// fn(step=, weight=, values=) -> scores, larger survives: one per stored value
// (values' shape) or one per position (weight's shape, read at the stored ones).
struct PruneCriteria {
  std::mutex mu;
  std::map<std::string, PyRef> fns;
};
PruneCriteria& prune_criteria() {
  static PruneCriteria* p = new PruneCriteria();  // never destroyed: a run may use one until exit
  return *p;
}

Tensor python_prune_scores(const std::string& name, const PyRef& fn, const Tensor& param, int64_t step) {
  const Tensor stored = values(param);
  const Tensor v = host_float(stored);
  const Tensor w = host_float(param);
  Tensor scores;
  {
    py::gil_scoped_acquire gil;
    try {
      const py::object r = (*fn)(py::arg("step") = step, py::arg("weight") = to_numpy_readonly(w),
                                 py::arg("values") = to_numpy_readonly(v));
      scores = scores_returned(r, str_cat("prune criterion '", name, "' (Python)"));
    } catch (py::error_already_set& e) { fail_from_python(str_cat("prune criterion '", name, "'"), e); }
  }
  COPPICE_CHECK(scores.shape() == stored.shape() || scores.shape() == param.shape(), "prune criterion '", name,
                "' (Python) returned scores of shape ", shape_to_string(scores.shape()), "; expected the weight's ",
                shape_to_string(param.shape()), " or one per stored value ", shape_to_string(stored.shape()));
  return scores.to(param.device());
}

}  // namespace

bool python_prune_criterion(const std::string& name, std::function<Tensor(const Tensor&, int64_t)>* out) {
  std::lock_guard<std::mutex> lock(prune_criteria().mu);
  auto it = prune_criteria().fns.find(name);
  if (it == prune_criteria().fns.end()) return false;
  *out = [name, fn = it->second](const Tensor& param, int64_t step) {
    return python_prune_scores(name, fn, param, step);
  };
  return true;
}

std::vector<std::string> python_prune_criteria() {
  std::lock_guard<std::mutex> lock(prune_criteria().mu);
  std::vector<std::string> names;
  for (const auto& [name, fn] : prune_criteria().fns) names.push_back(name);
  return names;
}

void bind_extensions(py::module_& m) {
  m.def(
      "register_growth_policy",
      [](const std::string& name, const py::function& fn, bool needs_dense_gradient) {
        register_growth_policy(name, [name, fn = hold(fn), needs_dense_gradient] {
          return std::make_shared<PythonGrowth>(name, fn, needs_dense_gradient);
        });
      },
      py::arg("name"), py::arg("fn"), py::arg("needs_dense_gradient") = true,
      "A growth policy by name: fn(layer, step, k, candidates, weight, gradient) returns k positions.");
  m.def("growth_policies", [] { return registered_growth_policies(); });

  m.def(
      "register_sparsifier",
      [](const std::string& name, const py::function& factory, const std::string& kind) {
        const SparsifierKind k = parse_kind(kind);
        register_sparsifier(name, [name, factory = hold(factory), k](const SparsifierSpec& spec) -> SparsifierPtr {
          py::gil_scoped_acquire gil;
          try {
            py::dict params;
            for (const auto& [key, value] : spec.params) params[py::str(key)] = value.text();  // spelled as given
            py::object keep = (*factory)(**params);
            COPPICE_CHECK(PyCallable_Check(keep.ptr()), "sparsifier '", name,
                          "' (Python): the factory returned something that is not callable; it must return "
                          "keep_mask(x, ctx)");
            return std::make_shared<PythonSparsifier>(describe(spec), k, hold(std::move(keep)));
          } catch (py::error_already_set& e) { fail_from_python(str_cat("sparsifier '", name, "' (its factory)"), e); }
        });
      },
      py::arg("name"), py::arg("factory"), py::arg("kind") = "materializing",
      "A sparsifier by name: factory(**params) (the rule's parameters, as strings) returns keep_mask(x, ctx), "
      "which returns a bool array of x's shape.");
  m.def(
      "sparsifiers", [] { return registered_sparsifiers(); }, "Every registered sparsifier name.");

  m.def(
      "register_prune_criterion",
      [](const std::string& name, const py::function& fn) {
        COPPICE_CHECK(!name.empty(), "register_prune_criterion: the name is empty");
        COPPICE_CHECK(name != "magnitude" && name != "movement" && name != "custom", "register_prune_criterion: '",
                      name, "' is a built-in criterion");
        std::lock_guard<std::mutex> lock(prune_criteria().mu);
        COPPICE_CHECK(prune_criteria().fns.count(name) == 0, "register_prune_criterion: '", name,
                      "' is already registered");
        prune_criteria().fns.emplace(name, hold(fn));
      },
      py::arg("name"), py::arg("fn"),
      "A prune criterion by name, for coppice.optim.MaskUpdater(prune=name): fn(step, weight, values) returns "
      "scores (larger survives), one per stored value or one per position of the weight.");
  m.def(
      "prune_criteria",
      [] {
        std::vector<std::string> names = {"magnitude", "movement"};
        for (const std::string& n : python_prune_criteria()) names.push_back(n);
        return names;
      },
      "The prune criteria MaskUpdater takes: the built-ins, then those registered from Python.");
}

}  // namespace coppice::python
