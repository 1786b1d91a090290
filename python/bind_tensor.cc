// The Tensor of Python: NumPy arrays in and out without copies
// (numpy_conversion.cc), DLPack both ways (dlpack_conversion.cc), formats
// from masks, to their parts (the index parts read-only) and back from them,
// and pickling (a tensor's bytes in the sparse safetensors encoding).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "python/bindings.h"
#include "python/dlpack.h"
#include "sparse/attention/routing.h"
#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/one_hot.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/storage.h"

namespace coppice::python {
namespace {

// The options of a format from the Python keywords (0: the format's default).
FormatOptions format_options(int64_t block_rows, int64_t block_cols, int64_t n, int64_t m) {
  FormatOptions o;
  o.block_rows = block_rows;
  o.block_cols = block_cols;
  o.n = n;
  o.m = m;
  return o;
}

// A sparse tensor's parts, as Python gets them: the stored values writable
// (the same memory: editing a weight's values is editing the weight), every
// other part (indices, offsets, masks, metadata) read-only, since the library
// trusts them when it multiplies.
std::map<std::string, Tensor> parts_for_python(const Tensor& t) {
  std::map<std::string, Tensor> out;
  if (!t.is_sparse()) {
    out["values"] = t;
    return out;
  }
  for (const auto& [name, part] : sparse_impl(t, "coppice.Tensor.parts").parts()) {
    out[name] = name == "values" ? part : read_only_view(part);
  }
  return out;
}

// What sparse_from_parts and Tensor.attributes call a format's attributes in
// Python: keywords (block_rows, block_cols, n, m, coalesced) for the built-in
// formats, the saved attribute strings (SparseImpl::attributes()) for a
// registered one.
py::dict keyword_attributes(const Tensor& t) {
  py::dict out;
  if (!t.is_sparse()) return out;
  const SparseImpl& impl = sparse_impl(t, "coppice.Tensor.attributes");
  const FormatSpec& spec = format_spec(t.format(), "coppice.Tensor.attributes");
  if (spec.layout == Layout::kCustom) {
    for (const auto& [k, v] : impl.attributes()) out[py::str(k)] = v;
    return out;
  }
  if (const auto block = block_shape_of(t)) {
    out["block_rows"] = block->first;
    out["block_cols"] = block->second;
  } else if (spec.options == FormatOptionKind::kNm) {
    const FormatOptions o = spec.options_of(t);
    out["n"] = o.n;
    out["m"] = o.m;
  }
  const auto attrs = impl.attributes();
  if (auto it = attrs.find("coalesced"); it != attrs.end()) out["coalesced"] = it->second == "true";
  return out;
}

// The keywords a built-in format takes, for messages and checks.
std::vector<std::string> keywords_of(const FormatSpec& spec) {
  if (has_block_shape(spec.options)) return {"block_rows", "block_cols"};
  if (spec.options == FormatOptionKind::kNm) return {"n", "m"};
  if (spec.layout == Layout::kCoo) return {"coalesced"};
  return {};
}

int64_t int_keyword(const py::handle& v, const std::string& op, const std::string& key) {
  COPPICE_CHECK(py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v), op, ": ", key, " must be an int, got ",
                type_name_of(v));
  const int64_t x = v.cast<int64_t>();
  COPPICE_CHECK(x > 0, op, ": ", key, " must be positive, got ", x);
  return x;
}

// A sparse tensor of `format` from the parts Tensor.parts() gives (and the
// attributes it does not carry), through the format's validating factory
// (FormatSpec::from_parts: sparse_csr, sparse_bsr, ...).
Tensor sparse_from_parts(const std::string& format, const Shape& shape, const py::object& parts_obj,
                         const py::kwargs& kwargs) {
  const std::string op = str_cat("coppice.sparse_from_parts(", format, ")");
  const FormatSpec& spec = format_spec(format, "coppice.sparse_from_parts");
  COPPICE_CHECK(spec.layout != Layout::kDense, op,
                ": a dense tensor has no parts to build it from (use coppice.tensor)");
  COPPICE_CHECK(static_cast<bool>(spec.from_parts), op, ": format '", format, "' cannot be built from parts");
  COPPICE_CHECK(py::isinstance<py::dict>(parts_obj), op, ": parts must be a dict of part name to array, got ",
                type_name_of(parts_obj));
  const py::dict parts_dict = py::reinterpret_borrow<py::dict>(parts_obj);
  FormatParts saved;
  saved.shape = shape;
  for (const auto& [key, value] : parts_dict) {
    COPPICE_CHECK(py::isinstance<py::str>(key), op, ": a key of parts is ", type_name_of(key), ", not a part name");
    const std::string name = key.cast<std::string>();
    COPPICE_CHECK(std::find(spec.parts.begin(), spec.parts.end(), name) != spec.parts.end(), op, ": unexpected part '",
                  name, "' (", format, " has parts ", str_join(spec.parts, ", "), ")");
    const std::string what = str_cat(op, ": parts['", name, "']");
    Tensor part = tensor_of(py::reinterpret_borrow<py::object>(value), what);
    COPPICE_CHECK(part.is_dense(), what, " is a ", part.format(), " tensor; parts are dense arrays");
    // The index parts are the library's own copy: it trusts them once checked,
    // so the caller's arrays must not be able to change them afterwards.
    // values share the array's memory, as coppice.tensor does.
    saved.parts[name] = name == "values" ? part : part.clone();
  }
  for (const std::string& name : spec.parts) {
    COPPICE_CHECK(saved.parts.count(name) != 0, op, ": missing part '", name, "' (", format, " has parts ",
                  str_join(spec.parts, ", "), ")");
  }
  const std::vector<std::string> keywords = keywords_of(spec);
  int64_t block_rows = 0, block_cols = 0;
  for (const auto& [key, value] : kwargs) {
    const std::string k = key.cast<std::string>();
    if (spec.layout == Layout::kCustom) {
      COPPICE_CHECK(py::isinstance<py::str>(value), op, ": attribute ", k, " must be a str, got ", type_name_of(value));
      saved.attributes[k] = value.cast<std::string>();
      continue;
    }
    COPPICE_CHECK(std::find(keywords.begin(), keywords.end(), k) != keywords.end(), op, ": unexpected attribute '", k,
                  "' (", format, keywords.empty() ? " takes none" : " takes " + str_join(keywords, ", "), ")");
    if (k == "block_rows") {
      block_rows = int_keyword(value, op, k);
    } else if (k == "block_cols") {
      block_cols = int_keyword(value, op, k);
    } else if (k == "n" || k == "m") {
      saved.attributes[k] = std::to_string(int_keyword(value, op, k));
    } else if (k == "coalesced") {
      COPPICE_CHECK(py::isinstance<py::bool_>(value), op, ": coalesced must be a bool, got ", type_name_of(value));
      saved.attributes[k] = value.cast<bool>() ? "true" : "false";
    }
  }
  if (block_cols != 0 && block_rows == 0) fail(op, ": block_cols without block_rows");
  if (block_rows != 0) {
    if (block_cols == 0) block_cols = block_rows;
    COPPICE_CHECK(spec.options != FormatOptionKind::kSquareBlock || block_rows == block_cols, op,
                  ": blocks are square, got block_rows ", block_rows, " and block_cols ", block_cols);
    saved.attributes["block"] = str_cat(block_rows, "x", block_cols);
  }
  for (const std::string& key : spec.required_attributes) {
    if (saved.attributes.count(key) != 0) continue;
    if (spec.layout == Layout::kCustom) fail(op, ": missing attribute '", key, "'");
    fail(op, ": missing attribute ", key == "block" ? "block_rows" : key,
         " (parts() does not carry it: ", "Tensor.attributes() gives ", str_join(keywords, ", "), ")");
  }
  Tensor t;
  try {
    t = spec.from_parts(saved);
  } catch (const Error& e) { fail(op, ": ", e.what()); }
  COPPICE_CHECK(t.shape() == shape, op, ": the parts give shape ", shape_to_string(t.shape()), ", not the shape ",
                shape_to_string(shape), " asked for");
  return t;
}

// Pickle: the tensor in the sparse safetensors encoding of a file
// (sparse/io/sparse_safetensors.h), as one entry named "tensor".
constexpr int kPickleVersion = 1;

py::bytes tensor_pickle_bytes(const Tensor& t) {
  COPPICE_CHECK(t.defined(), "pickle coppice.Tensor: the tensor is undefined");
  auto bytes = serialize_sparse_safetensors({{"tensor", t}});
  if (!bytes.ok()) fail("pickle coppice.Tensor: ", bytes.status().message());
  return py::bytes(*bytes);
}

Tensor tensor_from_pickle(int version, const py::bytes& data) {
  COPPICE_CHECK(version == kPickleVersion, "unpickle coppice.Tensor: version ", version, ", this build reads ",
                kPickleVersion);
  auto file = parse_sparse_safetensors(data.cast<std::string>(), "pickled coppice.Tensor");
  if (!file.ok()) fail("unpickle coppice.Tensor: ", file.status().message());
  const Tensor* t = file->find("tensor");
  COPPICE_CHECK(t != nullptr && file->tensors.size() == 1, "unpickle coppice.Tensor: no entry 'tensor'");
  return *t;
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol())
      .def(py::init([](const py::object& a) {
             return from_numpy(array_of(a, "coppice.Tensor: array"), "coppice.Tensor: array");
           }),
           py::arg("array"),
           "A tensor on the array's memory (no copy for native, aligned memory with non-negative, item-aligned "
           "strides); read-only where the array is.")
      // The memory belongs to the tensor that exports it (memoryview, numpy.asarray).
      .def_buffer([](const Tensor& t) { return to_numpy(t).request(); })
      .def("numpy", &to_numpy, "An array on the tensor's memory (dense CPU tensors); read-only where it is.")
      .def(
          "__dlpack__", [](const Tensor& t, const py::object&) { return to_dlpack(t); }, py::arg("stream") = py::none(),
          "DLPack export (CPU or CUDA memory, no copy).")
      .def("__dlpack_device__",
           [](const Tensor& t) {
             return py::make_tuple(static_cast<int>(t.device().is_cuda() ? kDLCUDA : kDLCPU),
                                   t.device().is_cuda() ? t.device().index : 0);
           })
      .def(
          "__array__", [](const Tensor& t, const py::object&) { return to_numpy(t); }, py::arg("dtype") = py::none())
      .def_property_readonly("shape", [](const Tensor& t) { return std::vector<int64_t>(t.shape()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().to_string(); })
      .def_property_readonly("format", [](const Tensor& t) { return std::string(t.format()); })
      .def_property_readonly("nnz", [](const Tensor& t) { return nnz(t); })
      .def("numel", &Tensor::numel)
      .def(
          "item", [](const Tensor& t) { return t.item(); }, "The value of a one-element tensor, as a float.")
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); })
      .def("to_dense", [](const Tensor& t) { return to_dense(t); })
      .def(
          "to_format",
          [](const Tensor& t, const std::string& format, int64_t block_rows, int64_t block_cols, int64_t n,
             int64_t mm) {
            const FormatOptions o = format_options(block_rows, block_cols, n, mm);
            return to_format(t, format, o);
          },
          py::arg("format"), py::arg("block_rows") = 0, py::arg("block_cols") = 0, py::arg("n") = 0, py::arg("m") = 0)
      .def("parts", &parts_for_python,
           "The parts of the tensor's format on its memory: values writable, index parts read-only. "
           "coppice.sparse_from_parts(t.format, t.shape, t.parts(), **t.attributes()) builds the tensor again.")
      .def("attributes", &keyword_attributes,
           "What a sparse tensor's format needs beyond its parts, as sparse_from_parts' keywords: block_rows and "
           "block_cols (bsr, blocked_ell), n and m (nm), coalesced (coo); {} for the other formats and dense tensors.")
      // __reduce__ rather than py::pickle: pybind11's __getstate__/__setstate__
      // pair aborts the interpreter under pickle protocols 0 and 1. The
      // function is coppice._tensor_from_pickle (python/coppice/__init__.py),
      // a Python function: pickle cannot name one of the extension's.
      .def(
          "__reduce__",
          [](const Tensor& t) {
            return py::make_tuple(py::module_::import("coppice").attr("_tensor_from_pickle"),
                                  py::make_tuple(kPickleVersion, tensor_pickle_bytes(t)));
          },
          "Pickling (and copy.deepcopy) keeps the format, shape, dtype and every part bit for bit, in the "
          "encoding coppice.save writes. A CUDA tensor is pickled through the CPU and unpickles on the CPU; "
          "an unpickled tensor is the library's own writable memory.")
      .def("to",
           [](const Tensor& t, const std::string& what) {
             DType d;
             if (dtype_from_name(what, &d)) return t.to(d);
             return t.to(Device::parse(what));
           })
      .def("__repr__", [](const Tensor& t) {
        return str_cat("coppice.Tensor(", t.format(), ", ", shape_to_string(t.shape()), ", ", dtype_name(t.dtype()),
                       ", ", t.device().to_string(), t.is_sparse() ? str_cat(", nnz=", nnz(t)) : "", ")");
      });

  m.def("from_dlpack", &from_dlpack, py::arg("obj"),
        "A tensor on the memory of anything with __dlpack__ (NumPy, PyTorch on the CPU or a GPU): no copy.");
  m.def(
      "tensor", [](const py::object& o) { return tensor_of(o, "coppice.tensor: data"); }, py::arg("data"),
      "A coppice.Tensor of a NumPy array (no copy) or of anything numpy.asarray takes.");
  m.def(
      "sparse_from_mask",
      [](const py::object& dense, const py::object& mask, const std::string& format, int64_t block_rows,
         int64_t block_cols, int64_t n, int64_t mm) {
        const FormatOptions o = format_options(block_rows, block_cols, n, mm);
        return sparse_from_mask(tensor_of_any(dense, "sparse_from_mask: dense"),
                                tensor_of_any(mask, "sparse_from_mask: mask").to(DType::kBool), format, o);
      },
      py::arg("dense"), py::arg("mask"), py::arg("format"), py::arg("block_rows") = 0, py::arg("block_cols") = 0,
      py::arg("n") = 0, py::arg("m") = 0);
  m.def(
      "one_hot",
      [](const py::object& indices, int64_t num_classes, const std::string& format, const std::string& dtype,
         int64_t block_rows, int64_t block_cols) {
        DType d;
        COPPICE_CHECK(dtype_from_name(dtype, &d), "one_hot: unknown dtype '", dtype, "'");
        return one_hot(tensor_of_any(indices, "one_hot: indices"), num_classes, format, d,
                       format_options(block_rows, block_cols, 0, 0));
      },
      py::arg("indices"), py::arg("num_classes") = -1, py::arg("format") = "", py::arg("dtype") = "f32",
      py::arg("block_rows") = 0, py::arg("block_cols") = 0,
      "indices.shape + [num_classes] with a 1 at each index's class: a CSR for 1-D indices, else a COO, or "
      "`format` (any of the table's, 'dense' included); num_classes -1: the largest index plus one.");
  m.def(
      "routed_blocks",
      [](const py::object& q, const py::object& k, int64_t block, int64_t window, int64_t top_k, bool causal) {
        RoutingOptions o{block, window, top_k, causal};
        const std::vector<bool> keep =
            routed_keep(tensor_of_any(q, "routed_blocks: q"), tensor_of_any(k, "routed_blocks: k"), o);
        const auto nb = static_cast<py::ssize_t>(std::lround(std::sqrt(static_cast<double>(keep.size()))));
        py::array_t<bool> out({nb, nb});
        bool* p = out.mutable_data();
        for (size_t i = 0; i < keep.size(); ++i) p[i] = keep[i];
        return out;
      },
      py::arg("q"), py::arg("k"), py::arg("block"), py::arg("window") = 1, py::arg("top_k") = 2,
      py::arg("causal") = true,
      "Routed attention's kept blocks [nb, nb] for q and k [B, T, H, d] (sparse/attention/routing.h): the local "
      "blocks within `window`, key block 0 and the `top_k` best by pooled q . k; model.options.attention: routed "
      "runs them on the fused kernels.");
  m.def("_tensor_from_pickle", &tensor_from_pickle, py::arg("version"), py::arg("data"),
        "What pickle calls to rebuild a coppice.Tensor (Tensor.__reduce__).");
  m.def("sparse_from_parts", &sparse_from_parts, py::arg("format"), py::arg("shape"), py::arg("parts"),
        "A sparse tensor of `format` and `shape` from its parts: the dict Tensor.parts() gives (arrays or dense "
        "Tensors), plus what parts() does not carry as keywords (Tensor.attributes(): block_rows and block_cols for "
        "bsr, blocked_ell's block_rows, n and m for nm, coalesced for coo). Checked by the format's own factory "
        "(sparse_csr, sparse_bsr, ...): a missing or unexpected part, a wrong dtype or length, an index out of range "
        "or out of order raise coppice.Error naming the part. values share the array's memory (as coppice.tensor); "
        "the index parts are copied.");
  m.def(
      "formats", [] { return format_names(); }, "The format names (the format table, sparse/formats.h).");
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Seeds this thread's default generator, which layers draw their initial weights from unless given a seed.");
}

}  // namespace coppice::python
