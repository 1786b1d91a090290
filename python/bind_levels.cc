// coppice.levels: formats declared by their levels (sparse/levels, issue 35's
// first part) from Python. A declaration is its text (describe's grammar:
// "blocked 2x2 (dense, compressed, dense, dense)"); a tensor in it is a dict
// of parts named by level ("positions_1", "coordinates_1", "values") with its
// shape. Arrays come as NumPy arrays, coppice.Tensors or DLPack producers.
// register() adds a declaration to the format table under a name, which
// every tensor, rule, job and mask update then takes.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "python/bindings.h"
#include "sparse/levels/builtin_levels.h"
#include "sparse/levels/level_format.h"
#include "sparse/levels/level_impl.h"
#include "sparse/levels/level_tensor.h"
#include "tensor/error.h"

namespace coppice::python {
namespace {

using levels::LevelTensor;

py::dict parts_dict(const LevelTensor& t) {
  py::dict d;
  for (const auto& [name, part] : levels::level_parts(t)) d[py::str(name)] = part;
  return d;
}

LevelTensor level_tensor_from(const py::dict& parts, const std::string& declaration, const Shape& shape,
                              const char* op) {
  std::map<std::string, Tensor> named;
  for (const auto& [key, value] : parts) {
    const std::string name = py::str(key).cast<std::string>();
    named[name] = tensor_of_any(py::reinterpret_borrow<py::object>(value), str_cat(op, ": part ", name));
  }
  return levels::level_tensor_from_parts(levels::parse_level_format(declaration, op), shape, named, op);
}

// A declaration as text ("blocked 16x16 (dense, ranged, ...)") or in the map
// form of a job's sparsity.formats: {"levels": [...], "block": [r, c] or r,
// "index": "i32", "values": "bf16"}.
levels::LevelFormat declaration_of(const py::object& declaration, const char* op) {
  if (py::isinstance<py::str>(declaration)) return levels::parse_level_format(declaration.cast<std::string>(), op);
  COPPICE_CHECK(py::isinstance<py::dict>(declaration), op, ": a declaration is text or a dict, got ",
                py::str(py::type::of(declaration).attr("__name__")).cast<std::string>());
  const std::string where = str_cat(op, ": declaration");
  std::vector<std::string> level_texts;
  std::vector<int64_t> block;
  std::string index = "i32", values;
  for (const auto& [key, value] : declaration.cast<py::dict>()) {
    const std::string k = py::str(key).cast<std::string>();
    const py::object v = py::reinterpret_borrow<py::object>(value);
    const std::string field = str_cat(where, ".", k);
    try {
      if (k == "levels") {
        COPPICE_CHECK(!py::isinstance<py::str>(v), field, ": expected a list of levels, got a string");
        level_texts = v.cast<std::vector<std::string>>();
      } else if (k == "block") {
        block = py::isinstance<py::int_>(v) ? std::vector<int64_t>{v.cast<int64_t>()} : v.cast<std::vector<int64_t>>();
      } else if (k == "index") {
        index = v.cast<std::string>();
      } else if (k == "values") {
        values = v.cast<std::string>();
      } else {
        fail(where, ": unknown key '", k, "' (expected levels, block, index, values)");
      }
    } catch (const py::cast_error&) {
      fail(field, ": cannot read ", py::str(py::repr(v)).cast<std::string>(),
           k == "block"    ? " as [rows, columns] or one size"
           : k == "levels" ? " as a list of levels"
                           : " as a name");
    }
  }
  return levels::level_format_from_fields(level_texts, block, index, values, where);
}

}  // namespace

void bind_levels(py::module_& m) {
  py::module_ l = m.def_submodule(
      "levels",
      "Formats declared by their levels (dense, compressed, singleton, ranged, n_out_of_m), the model of TACO and "
      "MLIR's sparse_tensor dialect: a declaration is text such as 'blocked 2x2 (dense, compressed, dense, dense)'; "
      "a tensor in one is a dict of parts named by level. register(name, declaration) makes it a format like the "
      "built-in ones: coppice.to_format, rules, jobs, RigL and GMP take the name; the generic CPU kernels serve it.");
  l.def(
      "register",
      [](const std::string& name, const py::object& declaration) {
        const char* op = "coppice.levels.register";
        const levels::LevelFormat format = declaration_of(declaration, op);
        levels::register_level_format(name, format, op);
        return levels::describe(format);
      },
      py::arg("name"), py::arg("declaration"),
      "Adds the format `name`, declared by `declaration` (text, or a dict of levels, block, index and values as a "
      "job's sparsity.formats writes it), to the format table and returns the declaration in full. "
      "Registering a name again with the same declaration does nothing; another declaration under a taken name, or a "
      "built-in format's name, raises coppice.Error. On a GPU only a built-in format's declaration (and the "
      "BSR-of-2:4 hybrid's linear) has kernels (docs/guide/levels.md).");
  l.def(
      "registered",
      [](const std::string& name) -> py::object {
        const std::optional<levels::LevelFormat> f = levels::registered_level_format(name);
        return f ? py::object(py::str(levels::describe(*f))) : py::object(py::none());
      },
      py::arg("name"), "The declaration registered under `name` (in full), or None.");
  l.def("names", &levels::level_format_names, "The names register() (or a job's sparsity.formats) added, in order.");
  l.def(
      "describe",
      [](const std::string& declaration) {
        return levels::describe(levels::parse_level_format(declaration, "coppice.levels.describe"));
      },
      py::arg("declaration"), "The declaration checked and written in full: every level's dimension and arguments.");
  l.def(
      "builtin",
      [](const std::string& format, int64_t rank, int64_t block_rows, int64_t block_cols, int64_t n, int64_t m) {
        const FormatOptions options{block_rows, block_cols, n, m};
        return levels::describe(levels::builtin_level_format(format, rank, options, "coppice.levels.builtin"));
      },
      py::arg("format"), py::arg("rank") = 2, py::arg("block_rows") = 0, py::arg("block_cols") = 0, py::arg("n") = 0,
      py::arg("m") = 0,
      "The declaration of a built-in format (csr, csc, coo, bsr, blocked_ell, nm) for tensors of `rank` "
      "dimensions, with bsr's and blocked_ell's block and nm's n and m.");
  l.def(
      "from_mask",
      [](const py::object& dense, const py::object& mask, const std::string& declaration) {
        const char* op = "coppice.levels.from_mask";
        const Tensor d = tensor_of_any(dense, str_cat(op, ": dense"));
        const Tensor k = tensor_of_any(mask, str_cat(op, ": mask"));
        return parts_dict(levels::level_from_mask(d, k, levels::parse_level_format(declaration, op), op));
      },
      py::arg("dense"), py::arg("mask"), py::arg("declaration"),
      "The parts (a dict by level) of `dense` at the positions where the bool `mask` holds, in the declared format "
      "(CPU); zeros where the format stores more than the mask.");
  l.def(
      "to_dense",
      [](const py::dict& parts, const std::string& declaration, const Shape& shape) {
        return levels::level_to_dense(level_tensor_from(parts, declaration, shape, "coppice.levels.to_dense"));
      },
      py::arg("parts"), py::arg("declaration"), py::arg("shape"),
      "The dense tensor of these parts in the declared format and shape, after checking them.");
  l.def(
      "convert",
      [](const py::dict& parts, const std::string& declaration, const Shape& shape, const std::string& to) {
        const char* op = "coppice.levels.convert";
        return parts_dict(levels::level_convert(level_tensor_from(parts, declaration, shape, op),
                                                levels::parse_level_format(to, op), op));
      },
      py::arg("parts"), py::arg("declaration"), py::arg("shape"), py::arg("to"),
      "These parts in the declared format, as parts of the format `to`, walking the stored entries (no dense "
      "intermediate): every stored entry kept, zeros where `to` stores more, duplicates summed.");
  l.def(
      "of_builtin",
      [](const py::object& tensor) {
        const char* op = "coppice.levels.of_builtin";
        const LevelTensor t = levels::level_tensor_of(tensor_of_any(tensor, str_cat(op, ": tensor")), op);
        return py::make_tuple(levels::describe(t.format), parts_dict(t));
      },
      py::arg("tensor"),
      "(declaration, parts) of a built-in sparse tensor (CPU): its parts as its format's declaration names them, "
      "byte for byte (Blocked-ELL's values in level order).");
  l.def(
      "to_builtin",
      [](const py::dict& parts, const std::string& declaration, const Shape& shape, const std::string& format) {
        const char* op = "coppice.levels.to_builtin";
        return levels::builtin_tensor_of(level_tensor_from(parts, declaration, shape, op), format, op);
      },
      py::arg("parts"), py::arg("declaration"), py::arg("shape"), py::arg("format"),
      "The built-in sparse tensor of `format` holding these parts (of_builtin inverted).");
}

}  // namespace coppice::python
