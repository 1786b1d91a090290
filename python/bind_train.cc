// coppice.train: a job (a YAML file, or a dict of its keys) run from Python,
// with a per-step callback. The job runs without the GIL; the callback takes
// it for its call. An exception raised in Python during the run (the
// callback, a growth policy, a sparsifier) stops it, and train() raises it
// again with its traceback.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.h"
#include "train/config.h"
#include "train/job.h"
#include "train/summary.h"

namespace coppice::python {
namespace {

py::dict summary_dict(const TrainingSummary& s) {
  py::dict d;
  d["final_step"] = s.final_step;
  d["total_steps"] = s.total_steps;
  d["losses"] = s.losses;
  d["seconds"] = s.seconds;
  if (s.validation) {
    d["validation_loss"] = s.validation->loss;
    d["validation_accuracy"] = s.validation->accuracy;
  }
  if (s.test) {
    d["test_loss"] = s.test->loss;
    d["test_accuracy"] = s.test->accuracy;
  }
  d["mask_updates"] = s.mask_updates.size();
  d["mask_update_overhead_s"] = mask_update_overhead_seconds(s);
  py::dict density;
  for (const LayerStats& l : s.model.layers) density[py::str(l.name)] = l.density;
  d["density"] = density;
  d["text"] = format_summary(s);
  return d;
}

py::dict train(const py::object& config, const std::vector<std::string>& overrides, const py::object& callback,
               int64_t max_steps, const std::string& run_dir) {
  clear_kept_python_error();
  absl::StatusOr<ValidatedJob> job = absl::InvalidArgumentError("no job");
  if (py::isinstance<py::str>(config)) {
    job = load_validated_job(config.cast<std::string>(), overrides);
  } else {
    // A dict: JSON is YAML's flow style.
    const std::string text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
    job = parse_validated_job(text, overrides);
  }
  if (!job.ok()) {
    // A Python sparsifier's factory that raised during validation: its own exception.
    raise_kept_python_error(std::string(job.status().message()));
    throw py::value_error(std::string(job.status().message()));
  }
  JobRunOptions opts;
  opts.stop_at_step = max_steps;
  opts.run_dir = run_dir;
  opts.progress_out = nullptr;
  if (!callback.is_none()) {
    const PyRef fn = hold(callback);
    opts.keep_going = [fn](int64_t done, double loss) {
      py::gil_scoped_acquire gil;
      try {
        return keep_going_returned((*fn)(done, loss), "coppice.train: the callback");
      } catch (py::error_already_set& e) {
        keep_python_error(e);
        return false;  // ends the run; train() raises the exception
      }
    };
  }
  TrainingSummary s;
  std::exception_ptr failure;
  {
    py::gil_scoped_release release;
    try {
      s = run_job(std::move(*job), opts);
    } catch (...) { failure = std::current_exception(); }
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      raise_kept_python_error(e.what());  // Python's exception, when Python code stopped the run
      throw;
    }
  }
  raise_kept_python_error("");  // a callback that raised ended the run early
  return summary_dict(s);
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("train", &train, py::arg("config"), py::arg("overrides") = std::vector<std::string>{},
        py::arg("callback") = py::none(), py::arg("max_steps") = -1, py::arg("run_dir") = "",
        "Runs a job (a YAML path, or a dict of its keys); callback(step, loss) after every step, False to stop.");
}

}  // namespace coppice::python
