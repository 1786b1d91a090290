// coppice.propagate: sparsity attributes propagated through one traced
// forward pass of a model (models/propagation), from Python: the plan (JSON
// lines, as a job with sparsity.propagate writes it) and the inferred output
// rules as a SparsityBuilder, which Module.apply_sparsity attaches.
#include <pybind11/stl.h>

#include <string>

#include "models/module.h"
#include "models/propagation/propagation.h"
#include "models/propagation/step_trace.h"
#include "python/bindings.h"
#include "sparsifiers/sparsity_builder.h"
#include "tensor/error.h"

namespace coppice::python {

void bind_propagation(py::module_& m) {
  m.def(
      "propagate",
      [](Module& model, const py::object& x, const std::string& device, double max_density) {
        COPPICE_CHECK(max_density > 0.0 && max_density <= 1.0, "propagate: max_density must be in (0, 1], got ",
                      max_density);
        const Variable input =
            py::isinstance<Variable>(x) ? x.cast<Variable>() : Variable(tensor_of(x, "propagate: x"));
        const DeviceType type = Device::parse(device).type;
        propagation::PropagateOptions options;
        options.max_density = max_density;
        propagation::StepTrace trace;
        propagation::Plan plan;
        {
          py::gil_scoped_release release;
          trace = propagation::trace_forward(model, input);
          plan = propagation::propagate(trace, type, {}, options);
        }
        SparsityBuilder schedule;
        py::list rules;
        for (const propagation::InferredRule& r : plan.rules) {
          schedule.output(r.rule.selector.pattern).forward(r.rule.forward.front());
          py::dict d;
          d["module"] = r.rule.selector.pattern;
          d["reason"] = r.reason;
          rules.append(d);
        }
        py::dict out;
        out["schedule"] = schedule;
        out["rules"] = rules;
        out["plan"] = propagation::plan_jsonl(trace, plan);
        return out;
      },
      py::arg("model"), py::arg("x"), py::arg("device") = "cpu", py::arg("max_density") = 0.1,
      "Traces model.forward(x) once (in evaluation mode; the mode comes back) and propagates sparsity attributes "
      "through it (docs/guide/propagation.md): returns {'schedule': a SparsityBuilder with the inferred output "
      "rules (a relu output feeding a linear becomes its CSR input where a kernel on `device` takes it and at most "
      "max_density of it is non-zero), 'rules': [{'module', 'reason'}], 'plan': the JSON lines a job writes}. "
      "model.apply_sparsity(result['schedule']) attaches the rules.");
}

}  // namespace coppice::python
