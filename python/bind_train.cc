// coppice.train: a job (a YAML file, or a dict of its keys) run from Python,
// with a per-step callback. The job runs without the GIL; the callback takes
// it for its call. An exception raised in Python during the run (the
// callback, a growth policy, a sparsifier) stops it, and train() raises it
// again with its traceback.
//
// coppice.data: TensorDataset and DataLoader (data/dataset.h, data/loader.h),
// the trainer's batches from Python: shuffled per epoch by a seeded
// permutation, the same on every machine.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
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
               int64_t max_steps, const std::string& run_dir, const std::string& resume) {
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
  opts.resume = resume;
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

// ---- coppice.data ------------------------------------------------------------------------------

// A sequence of (x, y) pairs as one TensorDataset: numpy.stack of the xs and of the ys.
std::shared_ptr<const Dataset> dataset_of_pairs(const py::sequence& pairs, const char* who) {
  COPPICE_CHECK(pairs.size() > 0, who, ": the dataset is empty");
  py::list xs, ys;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const py::object pair = pairs[i];
    COPPICE_CHECK(py::isinstance<py::sequence>(pair) && !py::isinstance<py::str>(pair) && py::len(pair) == 2, who,
                  ": dataset[", i, "] must be an (x, y) pair, got ", type_name_of(pair));
    xs.append(pair[py::int_(0)]);
    ys.append(pair[py::int_(1)]);
  }
  const py::module_ np = py::module_::import("numpy");
  auto stacked = [&](const py::list& items, const char* side) {
    try {
      return np.attr("stack")(items);
    } catch (py::error_already_set& e) {
      fail(who, ": the dataset's ", side, "s do not stack into one array (", describe_python_error(e), ")");
    }
  };
  const Tensor inputs = tensor_of(stacked(xs, "x"), str_cat(who, ": the dataset's xs"));
  const Tensor targets = tensor_of(stacked(ys, "y"), str_cat(who, ": the dataset's ys"));
  return std::make_shared<TensorDataset>(inputs, targets, "dataset of (x, y) pairs");
}

// A Python iterator over one epoch of a DataLoader.
class EpochIterator {
 public:
  EpochIterator(std::shared_ptr<const DataLoader> loader, int64_t epoch)
      : loader_(std::move(loader)), epoch_(loader_->epoch(epoch)), it_(epoch_.begin()), end_(epoch_.end()) {}
  py::tuple next() {
    if (it_ == end_) throw py::stop_iteration();
    const Batch b = *it_;
    ++it_;
    return py::make_tuple(b.inputs, b.targets);
  }

 private:
  std::shared_ptr<const DataLoader> loader_;
  DataLoader::Epoch epoch_;
  DataLoader::Iterator it_, end_;
};

// The loader and the epoch its next iteration runs (each `for` over it is the next epoch, as torch's reshuffling).
struct PyDataLoader {
  std::shared_ptr<const DataLoader> loader;
  int64_t epoch = 0;
};

void bind_data(py::module_& m) {
  py::module_ data = m.def_submodule(
      "data", "Datasets and the DataLoader (data/): batches of (inputs, targets) Tensors, shuffled per epoch by seed.");

  py::class_<Dataset, std::shared_ptr<Dataset>>(data, "Dataset",
                                                "A fixed number of (input, target) examples (data/dataset.h).")
      .def("__len__", &Dataset::size)
      .def_property_readonly("name", &Dataset::name)
      .def(
          "get_batch",
          [](const Dataset& d, const std::vector<int64_t>& indices) {
            const Batch b = d.get_batch(indices);
            return py::make_tuple(b.inputs, b.targets);
          },
          py::arg("indices"), "(inputs, targets) of the examples at `indices`, stacked in that order.");
  py::class_<TensorDataset, Dataset, std::shared_ptr<TensorDataset>>(
      data, "TensorDataset",
      "Example i is (inputs[i], targets[i]): two arrays or Tensors whose first dimensions agree (on their memory, no "
      "copy). Sparse inputs (a matrix [examples, features] of any format) batch as CSR rows, never densified.")
      .def(py::init([](const py::object& inputs, const py::object& targets) {
             return std::make_shared<TensorDataset>(tensor_of(inputs, "TensorDataset: inputs"),
                                                    tensor_of(targets, "TensorDataset: targets"));
           }),
           py::arg("inputs"), py::arg("targets"))
      .def_property_readonly("inputs", &TensorDataset::inputs)
      .def_property_readonly("targets", &TensorDataset::targets);

  py::class_<EpochIterator>(data, "_EpochIterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &EpochIterator::next);

  py::class_<PyDataLoader>(
      data, "DataLoader",
      "Batches of a dataset (a coppice.data.Dataset, or a sequence of (x, y) pairs of arrays, stacked once): each "
      "iteration yields (inputs, targets) Tensors, batch_size examples each (the last one shorter unless drop_last). "
      "With shuffle, epoch e's order is a permutation keyed by (seed, e) (data/loader.h), the same on every machine; "
      "each `for` over the loader runs the next epoch (set_epoch picks one).")
      .def(py::init([](const py::object& dataset, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last) {
             std::shared_ptr<const Dataset> d;
             if (py::isinstance<Dataset>(dataset)) {
               d = dataset.cast<std::shared_ptr<Dataset>>();
             } else {
               COPPICE_CHECK(py::isinstance<py::sequence>(dataset) && !py::isinstance<py::str>(dataset),
                             "DataLoader: dataset must be a coppice.data.Dataset or a sequence of (x, y) pairs, got ",
                             type_name_of(dataset));
               d = dataset_of_pairs(dataset.cast<py::sequence>(), "DataLoader");
             }
             DataLoaderOptions o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.seed = seed;
             o.drop_last = drop_last;
             return PyDataLoader{std::make_shared<const DataLoader>(std::move(d), o), 0};
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false, py::arg("seed") = 0,
           py::arg("drop_last") = false)
      .def(
          "__len__", [](const PyDataLoader& l) { return l.loader->num_batches(); }, "Batches per epoch.")
      .def(
          "__iter__",
          [](PyDataLoader& l) {
            auto it = std::make_unique<EpochIterator>(l.loader, l.epoch);
            ++l.epoch;
            return it;
          },
          "The next epoch's batches.")
      .def(
          "epoch_batches",
          [](const PyDataLoader& l, int64_t epoch) { return std::make_unique<EpochIterator>(l.loader, epoch); },
          py::arg("epoch"), "Epoch `epoch`'s batches (the loader's epoch count unchanged).")
      .def_property_readonly(
          "epoch", [](const PyDataLoader& l) { return l.epoch; }, "The epoch the next iteration runs.")
      .def(
          "set_epoch",
          [](PyDataLoader& l, int64_t epoch) {
            COPPICE_CHECK(epoch >= 0, "DataLoader.set_epoch: epoch must be >= 0, got ", epoch);
            l.epoch = epoch;
          },
          py::arg("epoch"), "The epoch the next iteration runs (when resuming).")
      .def(
          "indices", [](const PyDataLoader& l, int64_t epoch) { return l.loader->shard_indices(epoch); },
          py::arg("epoch"), "Epoch `epoch`'s dataset indices, in the order they are batched.")
      .def_property_readonly(
          "dataset",
          [](const PyDataLoader& l) {
            return std::const_pointer_cast<Dataset>(std::shared_ptr<const Dataset>(l.loader, &l.loader->dataset()));
          })
      .def_property_readonly("batch_size", [](const PyDataLoader& l) { return l.loader->options().batch_size; });
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("train", &train, py::arg("config"), py::arg("overrides") = std::vector<std::string>{},
        py::arg("callback") = py::none(), py::arg("max_steps") = -1, py::arg("run_dir") = "", py::arg("resume") = "",
        "Runs a job (a YAML path, or a dict of its keys); callback(step, loss) after every step, False to stop; "
        "resume: a checkpoint file or directory to go on from (the trainer's --resume).");
  bind_data(m);
}

}  // namespace coppice::python
