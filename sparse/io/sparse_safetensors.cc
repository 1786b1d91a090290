#include "sparse/io/sparse_safetensors.h"

#include <cctype>
#include <cstdint>
#include <exception>
#include <set>
#include <utility>
#include <vector>

#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

const std::string kFormatKey = "coppice.format.";
const std::string kShapeKey = "coppice.shape.";
const std::string kAttrKey = "coppice.attr.";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Parses a non-negative decimal integer (no sign, at most 18 digits).
bool parse_int(const std::string& s, size_t& pos, int64_t& out) {
  const size_t begin = pos;
  int64_t v = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) && pos - begin < 18) {
    v = v * 10 + (s[pos] - '0');
    ++pos;
  }
  if (pos == begin || (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])))) return false;
  out = v;
  return true;
}

void skip_spaces(const std::string& s, size_t& pos) {
  while (pos < s.size() && s[pos] == ' ') ++pos;
}

// The part names a format stores, in SparseImpl::parts() order; empty when
// the format is unknown or cannot be read back (no from_parts).
std::vector<std::string> part_names(const std::string& format) {
  const FormatSpec* spec = find_format(format);
  return spec == nullptr || !spec->from_parts ? std::vector<std::string>{} : spec->parts;
}

absl::StatusOr<std::pair<NamedTensors, std::map<std::string, std::string>>> flatten(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    if (starts_with(k, "coppice.")) {
      return absl::InvalidArgumentError(
          str_cat("write_sparse_safetensors: metadata key '", k, "' is reserved (\"coppice.\" prefix)"));
    }
    meta[k] = v;
  }
  NamedTensors entries;
  std::set<std::string> names, entry_names;
  for (const auto& named : tensors) {
    const std::string& name = named.first;  // not a structured binding: the lambda below captures it
    const Tensor& t = named.second;
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(str_cat("write_sparse_safetensors: duplicate tensor name '", name, "'"));
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(str_cat("write_sparse_safetensors: tensor '", name, "' is undefined"));
    }
    auto add_entry = [&](const std::string& entry, const Tensor& part) -> absl::Status {
      if (!entry_names.insert(entry).second) {
        return absl::InvalidArgumentError(str_cat("write_sparse_safetensors: tensor '", name, "': entry '", entry,
                                                  "' collides with another tensor's entry"));
      }
      entries.emplace_back(entry, part);
      return absl::OkStatus();
    };
    if (t.is_dense()) {
      absl::Status s = add_entry(name, t);
      if (!s.ok()) return s;
      continue;
    }
    const auto* impl = dynamic_cast<const SparseImpl*>(t.impl());
    const std::string format(t.format());
    if (impl == nullptr) {
      return absl::InvalidArgumentError(
          str_cat("write_sparse_safetensors: tensor '", name, "' of format '", format, "' is not a SparseImpl"));
    }
    for (const auto& [part, value] : impl->parts()) {
      absl::Status s = add_entry(str_cat(name, ".", part), value);
      if (!s.ok()) return s;
    }
    meta[kFormatKey + name] = format;
    meta[kShapeKey + name] = shape_json(t.shape());
    for (const auto& [k, v] : impl->attributes()) meta[str_cat(kAttrKey, name, ".", k)] = v;
  }
  return std::make_pair(std::move(entries), std::move(meta));
}

struct SparseEntry {
  std::string format;
  Shape shape;
  std::map<std::string, std::string> attrs;
  std::map<std::string, Tensor> parts;
};

// Builds tensor `name` from its parts through the format's from_parts;
// throws coppice::Error on bad parts (the caller turns it into a Status).
Tensor rebuild(const std::string& name, const SparseEntry& e) {
  const FormatSpec& spec = format_spec(e.format, "read_sparse_safetensors");
  for (const std::string& key : spec.required_attributes) {
    COPPICE_CHECK(e.attrs.count(key) != 0, "missing metadata 'coppice.attr.", name, ".", key, "'");
  }
  Tensor t = spec.from_parts(FormatParts{e.parts, e.attrs, e.shape});
  COPPICE_CHECK(t.shape() == e.shape, "the parts give shape ", shape_to_string(t.shape()), " but coppice.shape.", name,
                " says ", shape_to_string(e.shape));
  return t;
}

absl::StatusOr<SparseSafetensorsFile> rebuild_file(SafetensorsFile file, const std::string& source) {
  auto error = [&](const std::string& name, const std::string& what) {
    return absl::InvalidArgumentError(str_cat("read_sparse_safetensors: ", source, ": tensor '", name, "': ", what));
  };
  SparseSafetensorsFile out;
  std::map<std::string, SparseEntry> sparse;
  for (const auto& [k, v] : file.metadata) {
    if (starts_with(k, kFormatKey)) {
      const std::string name = k.substr(kFormatKey.size());
      if (name.empty()) return error(name, "empty name in metadata key '" + k + "'");
      if (part_names(v).empty()) return error(name, str_cat("unknown format '", v, "'"));
      sparse[name].format = v;
    } else if (!starts_with(k, "coppice.")) {
      out.metadata[k] = v;
    }
  }
  for (const auto& [k, v] : file.metadata) {
    if (starts_with(k, kShapeKey)) {
      const std::string name = k.substr(kShapeKey.size());
      auto it = sparse.find(name);
      if (it == sparse.end()) return error(name, str_cat("metadata '", k, "' without coppice.format.", name));
      if (!parse_shape_json(v, it->second.shape)) {
        return error(name, str_cat("shape '", v, "' in metadata is not a list of non-negative integers"));
      }
    } else if (starts_with(k, kAttrKey)) {
      // coppice.attr.<name>.<key>: attribute keys have no '.', names may.
      // (One lookup per key: trying every '.' would cost the square of a
      // hostile key's length.)
      const std::string rest = k.substr(kAttrKey.size());
      const size_t dot = rest.rfind('.');
      auto it = dot == std::string::npos || dot == 0 ? sparse.end() : sparse.find(rest.substr(0, dot));
      if (it == sparse.end()) return error(rest, str_cat("metadata '", k, "' names no sparse tensor"));
      it->second.attrs[rest.substr(dot + 1)] = v;
    }
  }
  for (const auto& [name, e] : sparse) {
    if (file.metadata.count(kShapeKey + name) == 0) {
      return error(name, str_cat("missing metadata 'coppice.shape.", name, "' (format ", e.format, ")"));
    }
  }
  // Which sparse tensor (and part) each entry belongs to, if any.
  std::map<std::string, std::pair<std::string, std::string>> owner;
  for (const auto& [name, e] : sparse) {
    for (const std::string& p : part_names(e.format)) owner[str_cat(name, ".", p)] = {name, p};
  }
  std::vector<std::pair<std::string, bool>> order;  // name, is_sparse
  std::set<std::string> placed;
  for (auto& [entry, t] : file.tensors) {
    auto it = owner.find(entry);
    if (it == owner.end()) {
      order.emplace_back(entry, false);
      out.tensors.emplace_back(entry, std::move(t));
      continue;
    }
    sparse[it->second.first].parts[it->second.second] = std::move(t);
    if (placed.insert(it->second.first).second) {
      order.emplace_back(it->second.first, true);
      out.tensors.emplace_back(it->second.first, Tensor());
    }
  }
  for (const auto& [name, e] : sparse) {
    for (const std::string& p : part_names(e.format)) {
      if (e.parts.count(p) == 0) {
        return error(name, str_cat("missing part '", name, ".", p, "' (format ", e.format, ")"));
      }
    }
    if (placed.count(name) == 0) {  // unreachable: every format has parts
      return error(name, "no parts");
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    if (!order[i].second) continue;
    const std::string& name = order[i].first;
    const SparseEntry& e = sparse.at(name);
    try {
      out.tensors[i].second = rebuild(name, e);
    } catch (const std::exception& ex) { return error(name, str_cat("(format ", e.format, ") ", ex.what())); }
  }
  return out;
}

}  // namespace

std::string shape_json(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? ", " : "", shape[i]);
  return s + "]";
}

bool parse_shape_json(const std::string& s, Shape& shape) {
  size_t pos = 0;
  skip_spaces(s, pos);
  if (pos >= s.size() || s[pos] != '[') return false;
  ++pos;
  skip_spaces(s, pos);
  shape.clear();
  if (pos < s.size() && s[pos] == ']') {
    ++pos;
  } else {
    for (;;) {
      skip_spaces(s, pos);
      int64_t d = 0;
      if (!parse_int(s, pos, d)) return false;
      shape.push_back(d);
      skip_spaces(s, pos);
      if (pos < s.size() && s[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos < s.size() && s[pos] == ']') {
        ++pos;
        break;
      }
      return false;
    }
  }
  skip_spaces(s, pos);
  return pos == s.size();
}

const Tensor* SparseSafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

absl::Status write_sparse_safetensors(const std::string& path, const NamedTensors& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  auto flat = flatten(tensors, metadata);
  if (!flat.ok()) return flat.status();
  return write_safetensors(path, flat->first, flat->second);
}

absl::StatusOr<std::string> serialize_sparse_safetensors(const NamedTensors& tensors,
                                                         const std::map<std::string, std::string>& metadata) {
  auto flat = flatten(tensors, metadata);
  if (!flat.ok()) return flat.status();
  return serialize_safetensors(flat->first, flat->second);
}

absl::StatusOr<SparseSafetensorsFile> read_sparse_safetensors(const std::string& path) {
  auto file = read_safetensors(path);
  if (!file.ok()) return file.status();
  return rebuild_file(std::move(*file), path);
}

absl::StatusOr<SafetensorsFile> flatten_sparse_tensors(const NamedTensors& tensors,
                                                       const std::map<std::string, std::string>& metadata) {
  auto flat = flatten(tensors, metadata);
  if (!flat.ok()) return flat.status();
  SafetensorsFile file;
  file.tensors = std::move(flat->first);
  file.metadata = std::move(flat->second);
  return file;
}

absl::StatusOr<SparseSafetensorsFile> rebuild_sparse_tensors(SafetensorsFile file, const std::string& source) {
  return rebuild_file(std::move(file), source);
}

absl::StatusOr<SparseSafetensorsFile> parse_sparse_safetensors(const std::string& bytes, const std::string& source) {
  auto file = parse_safetensors(bytes, source);
  if (!file.ok()) return file.status();
  return rebuild_file(std::move(*file), source);
}

}  // namespace coppice
