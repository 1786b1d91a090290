#include "sparse/levels/level_io.h"

#include <string_view>

#include "absl/status/status.h"
#include "sparse/io/sparse_safetensors.h"
#include "tensor/error.h"

namespace coppice::levels {
namespace {

constexpr std::string_view kLevelsKey = "coppice.levels.";
constexpr std::string_view kShapeKey = "coppice.shape.";

LevelTensor rebuild(const SafetensorsFile& file, const std::string& name, const std::string& declaration,
                    const std::string& where) {
  const auto shape_it = file.metadata.find(str_cat(kShapeKey, name));
  COPPICE_CHECK(shape_it != file.metadata.end(), where, ": no ", kShapeKey, name, " metadata entry");
  const LevelFormat format = parse_level_format(declaration, where);
  Shape shape;
  COPPICE_CHECK(parse_shape_json(shape_it->second, shape), where, ": the shape '", shape_it->second,
                "' is not a JSON list of sizes");
  std::map<std::string, Tensor> parts;
  for (size_t k = 0; k < format.levels.size(); ++k) {
    for (const std::string& part : {str_cat("positions_", k), str_cat("coordinates_", k)}) {
      if (const Tensor* p = file.find(str_cat(name, ".", part))) parts[part] = *p;
    }
  }
  const Tensor* values = file.find(str_cat(name, ".values"));
  COPPICE_CHECK(values != nullptr, where, ": no entry ", name, ".values");
  parts["values"] = *values;
  return level_tensor_from_parts(format, shape, parts, where);
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
