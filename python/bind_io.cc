// coppice.save and coppice.load: named tensors of any format in a safetensors
// file, through the library's sparse safetensors writer and reader
// (sparse/io/sparse_safetensors.h): the encoding of the trainer's checkpoints
// and of save_module (a sparse tensor as its parts plus coppice.format /
// coppice.shape / coppice.attr metadata), written atomically (a temporary
// file fsynced and renamed over the name).
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>

#include "autograd/variable.h"
#include "python/bindings.h"
#include "sparse/io/sparse_safetensors.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

// str, bytes or os.PathLike, as open() takes it.
std::string path_of(const py::object& path, const std::string& op) {
  try {
    return py::module_::import("os").attr("fsdecode")(path).cast<std::string>();
  } catch (py::error_already_set& e) {
    fail(op, ": path must be a str, bytes or os.PathLike, got ", type_name_of(path), " (", describe_python_error(e),
         ")");
  }
}

NamedTensors named_tensors_of(const py::object& tensors, const std::string& op) {
  COPPICE_CHECK(py::isinstance<py::dict>(tensors), op, ": tensors must be a dict of name to tensor, got ",
                type_name_of(tensors));
  NamedTensors out;
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(tensors)) {
    COPPICE_CHECK(py::isinstance<py::str>(key), op, ": a key of tensors is ", type_name_of(key), " ",
                  py::repr(key).cast<std::string>(), ", not a name");
    const std::string name = key.cast<std::string>();
    const std::string what = str_cat(op, ": tensors['", name, "']");
    if (py::isinstance<Variable>(value)) {
      out.emplace_back(name, value.cast<const Variable&>().value());
    } else {
      out.emplace_back(name, tensor_of(py::reinterpret_borrow<py::object>(value), what));
    }
  }
  return out;
}

std::map<std::string, std::string> metadata_of(const py::object& metadata, const std::string& op) {
  std::map<std::string, std::string> out;
  if (metadata.is_none()) return out;
  COPPICE_CHECK(py::isinstance<py::dict>(metadata), op, ": metadata must be a dict of str to str, got ",
                type_name_of(metadata));
  for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(metadata)) {
    COPPICE_CHECK(py::isinstance<py::str>(k) && py::isinstance<py::str>(v), op, ": metadata must map str to str, got ",
                  type_name_of(k), " to ", type_name_of(v));
    out[k.cast<std::string>()] = v.cast<std::string>();
  }
  return out;
}

}  // namespace

void bind_io(py::module_& m) {
  m.def(
      "save",
      [](const py::object& path, const py::object& tensors, const py::object& metadata) {
        const std::string p = path_of(path, "coppice.save");
        const NamedTensors named = named_tensors_of(tensors, "coppice.save");
        const std::map<std::string, std::string> meta = metadata_of(metadata, "coppice.save");
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = write_sparse_safetensors(p, named, meta);
        }
        if (!status.ok()) fail("coppice.save: ", status.message());
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = py::none(),
      "Writes a dict of name to tensor (any format, dtype and device; arrays and Variables too) to a safetensors "
      "file in the encoding of the trainer's checkpoints: a dense tensor as its entry, a sparse tensor 'w' as the "
      "entries 'w.<part>' plus the metadata coppice.format.w, coppice.shape.w and coppice.attr.w.* (any safetensors "
      "reader reads it; sparse/io/sparse_safetensors.h). metadata: str to str, keys not beginning with 'coppice.'. "
      "Atomic: the bytes go to '<path>.tmp.<pid>', are fsynced and renamed over path, so a failed write raises "
      "coppice.Error and leaves no file (and any old file) under path.");
  m.def(
      "load",
      [](const py::object& path, bool with_metadata) -> py::object {
        const std::string p = path_of(path, "coppice.load");
        absl::StatusOr<SparseSafetensorsFile> file;
        {
          py::gil_scoped_release release;
          file = read_sparse_safetensors(p);
        }
        if (!file.ok()) fail("coppice.load: ", file.status().message());
        py::dict tensors;
        for (const auto& [name, t] : file->tensors) tensors[py::str(name)] = t;
        if (!with_metadata) return tensors;
        py::dict meta;
        for (const auto& [k, v] : file->metadata) meta[py::str(k)] = v;
        return py::make_tuple(tensors, meta);
      },
      py::arg("path"), py::arg("metadata") = false,
      "Reads a safetensors file (coppice.save's, a trainer checkpoint, or any other): a dict of name to tensor in "
      "the file's order, sparse tensors rebuilt from their parts through their format's validating factory; CPU "
      "tensors of the library's own memory. With metadata=True, (tensors, metadata) with the user metadata "
      "(coppice.* keys removed). Any problem (unreadable, truncated, bad parts) raises coppice.Error naming the "
      "file and the tensor.");
}

}  // namespace coppice::python
