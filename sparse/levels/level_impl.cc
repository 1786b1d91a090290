#include "sparse/levels/level_impl.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sparse/convert.h"
#include "sparse/formats.h"
#include "sparse/levels/builtin_levels.h"
#include "tensor/ops.h"

namespace coppice::levels {
namespace {

// The declarations register_level_format added, by name (rows of the format
// table are never removed, so neither are these).
struct Declarations {
  std::mutex mutex;
  std::vector<std::pair<std::string, LevelFormat>> rows;
  static Declarations& instance() {
    static Declarations d;
    return d;
  }
};

bool same_declaration(const LevelFormat& a, const LevelFormat& b) {
  return same_levels(a, b) && a.value_dtype == b.value_dtype;
}

int64_t tensor_rank(const LevelFormat& f) {
  return static_cast<int64_t>(f.block.empty() ? f.levels.size() : f.block.size());
}

// The shape-independent part of check_level_format: the declaration checked
// against the smallest shape it could hold (each dimension its block extent
// times the m of the n:m levels that walk it).
void check_declaration(const LevelFormat& f, std::string_view op) {
  COPPICE_CHECK(!f.levels.empty(), op, ": a declaration needs at least one level");
  COPPICE_CHECK(f.block.empty() || f.levels.size() == 2 * f.block.size(), op, ": ", describe(f),
                ": a blocked declaration has two levels per dimension (outer and inner), got ", f.levels.size(),
                " levels for ", f.block.size(), " block extents");
  const int64_t rank = tensor_rank(f);
  Shape shape(static_cast<size_t>(rank), 1);
  for (int64_t d = 0; d < rank; ++d) {
    if (!f.block.empty()) shape[static_cast<size_t>(d)] = std::max<int64_t>(f.block[static_cast<size_t>(d)], 1);
  }
  for (const Level& l : f.levels) {
    // An inner level (dim >= rank) walks the block, whose extent is the declaration's.
    if (l.type == LevelType::kNOutOfM && l.dim >= 0 && l.dim < rank && l.m >= 1 && l.m <= 256) {
      shape[static_cast<size_t>(l.dim)] *= l.m;
    }
  }
  check_level_format(f, shape, op);
}

// Whether mask updates change whole blocks: a blocked declaration whose
// levels inside the block are all dense.
bool changes_whole_blocks(const LevelFormat& f) {
  if (f.block.empty()) return false;
  const int64_t rank = tensor_rank(f);
  return std::all_of(f.levels.begin(), f.levels.end(),
                     [&](const Level& l) { return l.dim < rank || l.type == LevelType::kDense; });
}

// The n:m groups of a declaration that is nm's in all but its name and
// dtypes: unblocked, dense levels in the dimensions' order, then n_out_of_m
// over the last dimension, so that every row keeps n of each m consecutive
// entries. Other n:m declarations (blocked ones, groups along another
// dimension) hold their groups elsewhere: none.
std::optional<NmGroups> row_nm_groups(const LevelFormat& f) {
  if (!f.block.empty()) return std::nullopt;
  const int64_t last = static_cast<int64_t>(f.levels.size()) - 1;
  for (int64_t k = 0; k < last; ++k) {
    const Level& l = f.levels[static_cast<size_t>(k)];
    if (l.type != LevelType::kDense || l.dim != k) return std::nullopt;
  }
  const Level& groups = f.levels.back();
  if (groups.type != LevelType::kNOutOfM || groups.dim != last) return std::nullopt;
  return NmGroups{groups.n, groups.m};
}

// The part names, in level order: what the row says the format is saved as.
std::vector<std::string> part_names(const LevelFormat& f) {
  std::vector<std::string> names;
  for (size_t k = 0; k < f.levels.size(); ++k) {
    const LevelType type = f.levels[k].type;
    if (type == LevelType::kCompressed) names.push_back(str_cat("positions_", k));
    if (type != LevelType::kDense) names.push_back(str_cat("coordinates_", k));
  }
  names.push_back("values");
  return names;
}

// `t` with its parts on the CPU, for the host reads: checks, stored
// positions, the generic dense form.
LevelTensor on_cpu(const LevelTensor& t) { return t.values.device().is_cpu() ? t : level_tensor_to(t, Device::cpu()); }

// (Format options never reach here: the row declares none, so to_format and
// sparse_from_mask resolve them to nothing; the block is the declaration's.)
// Built on the CPU (the walk is the host's), then moved to dense's device.
Tensor from_mask(const std::string& name, const LevelFormat& f, const Tensor& dense, const Tensor& mask,
                 std::string_view op) {
  const Tensor t =
      level_format_tensor(name, level_from_mask(dense.to(Device::cpu()), mask.to(Device::cpu()), f, op), op);
  return dense.device().is_cpu() ? t : to_device(t, dense.device());
}

Tensor from_parts(const std::string& name, const LevelFormat& f, const FormatParts& saved) {
  const std::string op = str_cat("format '", name, "'");
  if (auto it = saved.attributes.find("levels"); it != saved.attributes.end()) {
    const LevelFormat declared = parse_level_format(it->second, op);
    COPPICE_CHECK(same_declaration(declared, f), op, ": saved as ", describe(declared), ", but '", name,
                  "' is declared as ", describe(f));
  }
  return level_format_tensor(name, level_tensor_from_parts(f, saved.shape, saved.parts, op), op);
}

}  // namespace

struct LevelImpl::BuiltinPattern {
  std::once_flag once;
  std::optional<std::string> format;  // the built-in format that fits, if any
  Tensor pattern;                     // the first tensor of the pattern as that format
};

LevelImpl::LevelImpl(std::string name, LevelTensor tensor, uint64_t pattern_version)
    : SparseImpl(tensor.shape, tensor.values.dtype(), tensor.values.device(), pattern_version),
      name_(std::move(name)),
      tensor_(std::move(tensor)),
      builtin_(std::make_shared<BuiltinPattern>()) {
  const std::vector<int64_t> pos = level_stored_positions(on_cpu(tensor_));
  nnz_ = std::count_if(pos.begin(), pos.end(), [](int64_t p) { return p >= 0; });
}

LevelImpl::LevelImpl(std::string name, LevelTensor tensor, uint64_t pattern_version, int64_t nnz,
                     std::shared_ptr<BuiltinPattern> builtin)
    : SparseImpl(tensor.shape, tensor.values.dtype(), tensor.values.device(), pattern_version),
      name_(std::move(name)),
      tensor_(std::move(tensor)),
      nnz_(nnz),
      builtin_(std::move(builtin)) {}

std::optional<Tensor> LevelImpl::as_builtin() const {
  BuiltinPattern& b = *builtin_;
  std::call_once(b.once, [&] {
    b.format = builtin_format_of(tensor_.format, tensor_.shape);
    if (!b.format) return;
    // Checked and built on the host once per pattern and device, then moved.
    const Tensor pattern = builtin_tensor_of(on_cpu(tensor_), *b.format, "as_builtin");
    b.pattern = device().is_cpu() ? pattern : to_device(pattern, device());
  });
  if (!b.format) return std::nullopt;
  const Tensor& stored = coppice::values(b.pattern);
  return coppice::with_values(b.pattern, builtin_values_of(tensor_, *b.format).reshape(stored.shape()));
}

SparseParts LevelImpl::parts() const {
  SparseParts out;
  const std::map<std::string, Tensor> parts = level_parts(tensor_);
  for (const std::string& part : part_names(tensor_.format)) out.emplace_back(part, parts.at(part));
  return out;
}

std::map<std::string, std::string> LevelImpl::attributes() const { return {{"levels", describe(tensor_.format)}}; }

Tensor LevelImpl::with_values(const Tensor& values) const {
  COPPICE_CHECK(values.shape() == tensor_.values.shape(), name_, ".with_values: values of shape ",
                shape_to_string(values.shape()), ", expected ", shape_to_string(tensor_.values.shape()));
  COPPICE_CHECK(values.device() == device(), name_, ".with_values: values on ", values.device().to_string(),
                ", but the tensor's parts are on ", device().to_string());
  LevelTensor t = tensor_;
  t.values = values.contiguous();
  return Tensor(std::shared_ptr<LevelImpl>(new LevelImpl(name_, std::move(t), pattern_version(), nnz_, builtin_)));
}

// A built-in format's declaration densifies on that format's kernels (the
// device's); any other on the host.
Tensor LevelImpl::to_dense() const {
  if (device().is_cpu()) return level_to_dense(tensor_);
  if (const std::optional<Tensor> builtin = as_builtin()) return coppice::to_dense(*builtin);
  return level_to_dense(on_cpu(tensor_)).to(device());
}

Tensor LevelImpl::to(TensorOptions options) const {
  COPPICE_CHECK(!tensor_.format.value_dtype || options.dtype == *tensor_.format.value_dtype, "to: format '", name_,
                "' declares its values ", dtype_name(*tensor_.format.value_dtype), "; cannot convert them to ",
                dtype_name(options.dtype));
  const bool moves = options.device != device();
  LevelTensor t = moves ? level_tensor_to(tensor_, options.device) : tensor_;
  t.values = t.values.to(options.dtype);
  // The built-in view is per device: a moved tensor builds its own.
  std::shared_ptr<BuiltinPattern> builtin = moves ? std::make_shared<BuiltinPattern>() : builtin_;
  return Tensor(
      std::shared_ptr<LevelImpl>(new LevelImpl(name_, std::move(t), pattern_version(), nnz_, std::move(builtin))));
}

void register_level_format(const std::string& name, const LevelFormat& format, std::string_view op) {
  COPPICE_CHECK(!name.empty(), op, ": a level format needs a name");
  check_declaration(format, str_cat(op, ": format '", name, "'"));
  Declarations& d = Declarations::instance();
  std::lock_guard<std::mutex> lock(d.mutex);
  for (const auto& [n, f] : d.rows) {
    if (n != name) continue;
    COPPICE_CHECK(same_declaration(f, format), op, ": format '", name, "' is already declared as ", describe(f),
                  "; it cannot be declared again as ", describe(format));
    return;
  }
  COPPICE_CHECK(find_format(name) == nullptr, op, ": format '", name,
                "' is already registered (a built-in or another user's format); choose another name");
  FormatSpec spec;
  spec.name = name;
  spec.rank = FormatRank::kAtLeast1;
  spec.holds_any_pattern = std::none_of(format.levels.begin(), format.levels.end(),
                                        [](const Level& l) { return l.type == LevelType::kNOutOfM; });
  spec.parts = part_names(format);
  spec.from_mask = [name, format](const Tensor& dense, const Tensor& mask, const FormatOptions&,
                                  std::string_view from_op) { return from_mask(name, format, dense, mask, from_op); };
  spec.from_parts = [name, format](const FormatParts& saved) { return from_parts(name, format, saved); };
  spec.stored_positions = [](const Tensor& t) {
    return level_stored_positions(on_cpu(level_impl(t, "stored_positions").tensor()));
  };
  if (changes_whole_blocks(format) && format.block.size() == 2) {
    const std::pair<int64_t, int64_t> block{format.block[0], format.block[1]};
    spec.fixed_block = block;
  }
  if (const std::optional<NmGroups> groups = row_nm_groups(format)) {
    spec.nm_groups = [groups = *groups](const FormatOptions&) { return groups; };
  }
  register_format(std::move(spec));
  d.rows.emplace_back(name, format);
}

std::optional<LevelFormat> registered_level_format(std::string_view name) {
  Declarations& d = Declarations::instance();
  std::lock_guard<std::mutex> lock(d.mutex);
  for (const auto& [n, f] : d.rows) {
    if (n == name) return f;
  }
  return std::nullopt;
}

std::vector<std::string> level_format_names() {
  Declarations& d = Declarations::instance();
  std::lock_guard<std::mutex> lock(d.mutex);
  std::vector<std::string> names;
  for (const auto& row : d.rows) names.push_back(row.first);
  return names;
}

Tensor level_format_tensor(const std::string& name, LevelTensor tensor, std::string_view op) {
  const std::optional<LevelFormat> declared = registered_level_format(name);
  COPPICE_CHECK(declared.has_value(), op, ": '", name, "' is not a registered level format");
  COPPICE_CHECK(same_levels(*declared, tensor.format), op, ": a tensor of ", describe(tensor.format),
                " is not of format '", name, "' (", describe(*declared), ")");
  tensor.format = *declared;
  check_level_tensor(on_cpu(tensor), op);
  return Tensor(std::make_shared<LevelImpl>(name, std::move(tensor), new_pattern_version()));
}

const LevelImpl& level_impl(const Tensor& t, std::string_view op) {
  const auto* impl = t.defined() ? dynamic_cast<const LevelImpl*>(t.impl()) : nullptr;
  COPPICE_CHECK(impl != nullptr, op, ": expected a tensor of a format declared by its levels, got ",
                t.defined() ? std::string(t.format()) : std::string("an undefined tensor"));
  return *impl;
}

// The family's conversion to dense, for the dispatcher's counted fallback.
const ToDenseRegistrar kToDense{std::string(kLevelFamily)};

}  // namespace coppice::levels
