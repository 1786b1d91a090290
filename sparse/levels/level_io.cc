#include "sparse/levels/level_io.h"

#include <string_view>

#include "absl/status/status.h"
#include "tensor/error.h"
#include "tensor/io/json.h"

namespace coppice::levels {
namespace {

constexpr std::string_view kLevelsKey = "coppice.levels.";
constexpr std::string_view kShapeKey = "coppice.shape.";

std::string shape_json(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += str_cat(d == 0 ? "" : ", ", shape[d]);
  return s + "]";
}

Shape parse_shape(const std::string& text, const std::string& where) {
  const absl::StatusOr<json::Value> v = json::parse(text);
  COPPICE_CHECK(v.ok() && v->is_array(), where, ": the shape '", text, "' is not a JSON list of sizes");
  Shape shape;
  for (const json::Value& item : v->items()) {
    COPPICE_CHECK(item.is_integer() && item.as_integer() >= 0, where, ": the shape '", text,
                  "' is not a JSON list of sizes");
    shape.push_back(item.as_integer());
  }
  return shape;
}

LevelTensor rebuild(const SafetensorsFile& file, const std::string& name, const std::string& declaration,
                    const std::string& where) {
  const auto shape_it = file.metadata.find(str_cat(kShapeKey, name));
  COPPICE_CHECK(shape_it != file.metadata.end(), where, ": no ", kShapeKey, name, " metadata entry");
  LevelTensor t;
  t.format = parse_level_format(declaration, where);
  t.shape = parse_shape(shape_it->second, where);
  const size_t levels = t.format.levels.size();
  t.positions.resize(levels);
  t.coordinates.resize(levels);
  for (size_t k = 0; k < levels; ++k) {
    if (const Tensor* p = file.find(str_cat(name, ".positions_", k))) t.positions[k] = *p;
    if (const Tensor* c = file.find(str_cat(name, ".coordinates_", k))) t.coordinates[k] = *c;
  }
  const Tensor* values = file.find(str_cat(name, ".values"));
  COPPICE_CHECK(values != nullptr, where, ": no entry ", name, ".values");
  t.values = *values;
  check_level_tensor(t, where);
  return t;
}

}  // namespace

void add_level_tensor(const std::string& name, const LevelTensor& t, NamedTensors& tensors,
                      std::map<std::string, std::string>& metadata) {
  for (const auto& [part, tensor] : level_parts(t)) tensors.emplace_back(str_cat(name, ".", part), tensor);
  metadata[str_cat(kLevelsKey, name)] = describe(t.format);
  metadata[str_cat(kShapeKey, name)] = shape_json(t.shape);
}

absl::StatusOr<std::map<std::string, LevelTensor>> level_tensors_of(const SafetensorsFile& file,
                                                                    const std::string& source) {
  std::map<std::string, LevelTensor> out;
  for (const auto& [key, declaration] : file.metadata) {
    if (key.compare(0, kLevelsKey.size(), kLevelsKey) != 0) continue;
    const std::string name = key.substr(kLevelsKey.size());
    try {
      out[name] = rebuild(file, name, declaration, str_cat(source, ": level tensor '", name, "'"));
    } catch (const Error& e) { return absl::InvalidArgumentError(e.what()); }
  }
  return out;
}

}  // namespace coppice::levels
