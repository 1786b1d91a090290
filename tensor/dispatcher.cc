#include "tensor/dispatcher.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "tensor/dispatch_observer.h"
#include "tensor/op_profile.h"

namespace coppice {
namespace {

std::string_view attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::kInt: return "an int";
    case AttrType::kDouble: return "a double";
    case AttrType::kBool: return "a bool";
    case AttrType::kString: return "a string";
    case AttrType::kInts: return "a list of ints";
  }
  return "?";
}

// Whether `value` is of `type` (AttrValue's alternatives are in AttrType's
// order; an int passes for a double, as Attrs::get_double converts it).
bool attr_is(const AttrValue& value, AttrType type) {
  return value.index() == static_cast<size_t>(type) ||
         (type == AttrType::kDouble && std::holds_alternative<int64_t>(value));
}

// Every attribute of a call is one the op declares, of its type (an op whose
// attributes are declared elsewhere, attrs_from, is not checked here).
void check_attrs(const OpSpec& spec, const Attrs& attrs) {
  if (!spec.attrs_from.empty()) return;
  for (const auto& [name, value] : attrs.entries()) {
    const AttrSpec* declared = nullptr;
    for (const AttrSpec& a : spec.attrs) {
      if (a.name == name) declared = &a;
    }
    if (declared == nullptr) {
      std::vector<std::string_view> names;
      for (const AttrSpec& a : spec.attrs) names.push_back(a.name);
      fail(spec.name, ": attribute '", name, "' is not declared (tensor/op_table.h declares ",
           names.empty() ? std::string("none") : str_join(names, ", "), ")");
    }
    COPPICE_CHECK(attr_is(value, declared->type), spec.name, ": attribute '", name, "' must be ",
                  attr_type_name(declared->type), " (tensor/op_table.h)");
  }
}

}  // namespace

Attrs& Attrs::set(std::string_view name, AttrValue value) {
  for (auto& [n, v] : values_) {
    if (n == name) {
      v = std::move(value);
      return *this;
    }
  }
  values_.emplace_back(std::string(name), std::move(value));
  return *this;
}

const AttrValue* Attrs::lookup(std::string_view name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return &v;
  return nullptr;
}

bool Attrs::has(std::string_view name) const { return lookup(name) != nullptr; }

const AttrValue& Attrs::find(std::string_view name) const {
  const AttrValue* v = lookup(name);
  COPPICE_CHECK(v != nullptr, "op attribute '", name, "' is missing");
  return *v;
}

int64_t Attrs::get_int(std::string_view name) const {
  const AttrValue& v = find(name);
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  const auto* i = std::get_if<int64_t>(&v);
  COPPICE_CHECK(i != nullptr, "op attribute '", name, "' is not an integer");
  return *i;
}

double Attrs::get_double(std::string_view name) const {
  const AttrValue& v = find(name);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  const auto* d = std::get_if<double>(&v);
  COPPICE_CHECK(d != nullptr, "op attribute '", name, "' is not a number");
  return *d;
}

bool Attrs::get_bool(std::string_view name) const {
  const AttrValue& v = find(name);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i != 0;
  const auto* b = std::get_if<bool>(&v);
  COPPICE_CHECK(b != nullptr, "op attribute '", name, "' is not a bool");
  return *b;
}

const std::string& Attrs::get_string(std::string_view name) const {
  const auto* s = std::get_if<std::string>(&find(name));
  COPPICE_CHECK(s != nullptr, "op attribute '", name, "' is not a string");
  return *s;
}

const std::vector<int64_t>& Attrs::get_ints(std::string_view name) const {
  const auto* v = std::get_if<std::vector<int64_t>>(&find(name));
  COPPICE_CHECK(v != nullptr, "op attribute '", name, "' is not a list of integers");
  return *v;
}

int64_t Attrs::get_int(std::string_view name, int64_t fallback) const { return has(name) ? get_int(name) : fallback; }
double Attrs::get_double(std::string_view name, double fallback) const {
  return has(name) ? get_double(name) : fallback;
}
bool Attrs::get_bool(std::string_view name, bool fallback) const { return has(name) ? get_bool(name) : fallback; }

Dispatcher& Dispatcher::instance() {
  static Dispatcher* d = new Dispatcher();  // never destroyed: used from static destructors
  return *d;
}

void Dispatcher::register_kernel(const std::string& op, DeviceType device, std::vector<std::string> formats,
                                 Kernel kernel) {
  // Registrations run at static initialization, where the exception ends the
  // program, and std::terminate need not print it: the line goes to stderr
  // first, so that the program stops naming the op.
  auto refuse = [](const std::string& message) {
    std::fprintf(stderr, "coppice: %s\n", message.c_str());
    throw Error(message);
  };
  const OpSpec* spec = find_op(op);
  if (spec == nullptr) {
    refuse(
        str_cat("register_kernel: op '", op, "' is not declared (tensor/op_table.h; a user's op: declare_op first)"));
  }
  if (formats.size() < static_cast<size_t>(spec->min_inputs) ||
      formats.size() > static_cast<size_t>(spec->max_inputs)) {
    refuse(str_cat("register_kernel: op '", op, "' takes ", spec->arity(), ", not ", formats.size(), " (",
                   str_join(formats, ", "), ")"));
  }
  OpKernels& entry = kernels_[op];
  entry.spec = spec;
  entry.min_inputs = static_cast<size_t>(spec->min_inputs);
  entry.max_inputs = static_cast<size_t>(spec->max_inputs);
  std::vector<Registered>& kernels = entry.by_device[static_cast<size_t>(device)];
  for (Registered& r : kernels) {
    if (r.formats == formats) {  // a later registration replaces an earlier one
      r.kernel = std::move(kernel);
      return;
    }
  }
  kernels.push_back({std::move(formats), std::move(kernel)});
}

void Dispatcher::register_to_dense(std::string format, ToDense fn) {
  to_dense_.insert_or_assign(std::move(format), std::move(fn));
}

const Dispatcher::OpKernels* Dispatcher::lookup(std::string_view op) const {
  // Debian's Abseil has a string_view of its own: the lookup without a copy takes one.
  auto it = kernels_.find(absl::string_view(op.data(), op.size()));
  return it == kernels_.end() ? nullptr : &it->second;
}

const Kernel* Dispatcher::find_in(const OpKernels& kernels, DeviceType device,
                                  absl::Span<const std::string_view> formats) {
  const Kernel* any = nullptr;
  for (const Registered& r : kernels.by_device[static_cast<size_t>(device)]) {
    if (r.formats.size() != formats.size()) continue;
    bool exact = true, wildcard = true;
    for (size_t i = 0; i < formats.size(); ++i) {
      exact = exact && r.formats[i] == formats[i];
      wildcard = wildcard && r.formats[i] == "*";
    }
    if (exact) return &r.kernel;
    if (wildcard) any = &r.kernel;
  }
  return any;
}

const Kernel* Dispatcher::find(std::string_view op, DeviceType device,
                               absl::Span<const std::string_view> formats) const {
  const OpKernels* kernels = lookup(op);
  return kernels == nullptr ? nullptr : find_in(*kernels, device, formats);
}

bool Dispatcher::has_kernel(std::string_view op, DeviceType device) const {
  const OpKernels* kernels = lookup(op);
  return kernels != nullptr && !kernels->by_device[static_cast<size_t>(device)].empty();
}

std::vector<Dispatcher::Cell> Dispatcher::cells() const {
  std::vector<Cell> out;
  for (const auto& [op, kernels] : kernels_) {
    for (size_t d = 0; d < kDeviceTypes; ++d) {
      for (const Registered& r : kernels.by_device[d]) out.push_back({op, static_cast<DeviceType>(d), r.formats});
    }
  }
  std::sort(out.begin(), out.end(), [](const Cell& a, const Cell& b) {
    return std::tie(a.op, a.device, a.formats) < std::tie(b.op, b.device, b.formats);
  });
  return out;
}

namespace {
thread_local DispatchObserver* current_dispatch_observer = nullptr;

std::string cell_text(std::string_view op, absl::Span<const std::string_view> formats, DeviceType device) {
  return str_cat(op, "(", str_join(formats, ", "), ") on ", device_type_name(device));
}
}  // namespace

DispatchObserver* dispatch_observer() { return current_dispatch_observer; }

ScopedDispatchObserver::ScopedDispatchObserver(DispatchObserver* observer) : previous_(current_dispatch_observer) {
  current_dispatch_observer = observer;
}

ScopedDispatchObserver::~ScopedDispatchObserver() { current_dispatch_observer = previous_; }

std::vector<Tensor> Dispatcher::call(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs) const {
  // The input count against the op's arity and the attributes against its
  // declaration: from its kernels' entry on the hot path, from the table
  // only when the op has no kernel at all.
  const OpKernels* kernels = lookup(op);
  const OpSpec* spec = kernels != nullptr ? kernels->spec : find_op(op);
  if (spec != nullptr) {
    const size_t lo = kernels != nullptr ? kernels->min_inputs : static_cast<size_t>(spec->min_inputs);
    const size_t hi = kernels != nullptr ? kernels->max_inputs : static_cast<size_t>(spec->max_inputs);
    COPPICE_CHECK(inputs.size() >= lo && inputs.size() <= hi, op, ": takes ", arity_text(lo, hi), ", got ",
                  inputs.size());
    check_attrs(*spec, attrs);
  }
  absl::InlinedVector<std::string_view, 8> formats;
  const Tensor* first = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      formats.push_back("none");
      continue;
    }
    formats.push_back(t.format());
    if (first == nullptr) {
      first = &t;
    } else {
      COPPICE_CHECK(t.device() == first->device(), op, ": input ", i, " is on ", t.device().to_string(),
                    " but an earlier input is on ", first->device().to_string(), "; move them to one device first");
    }
  }
  COPPICE_CHECK(first != nullptr, op, ": called with no defined input");
  DeviceType device = first->device().type;
  COPPICE_CHECK(spec != nullptr, op, ": no kernel registered for (", str_join(formats, ", "), ") on ",
                device_type_name(device), "; '", op, "' is not a declared op (tensor/op_table.h)");
  auto run = [&](const Kernel& k, absl::Span<const std::string_view> keys) {
    if (DispatchObserver* o = current_dispatch_observer) o->on_kernel(cell_text(op, keys, device));
    if (!op_profile_enabled()) return k(inputs, attrs);
    ProfileScope scope(str_cat(cell_text(op, keys, device),
                               op_profile_shapes() ? " " + shape_to_string(first->shape()) : std::string()),
                       first->device());
    return k(inputs, attrs);
  };
  if (const Kernel* k = kernels == nullptr ? nullptr : find_in(*kernels, device, formats)) return run(*k, formats);
  // No kernel for the formats themselves: their families' (a format's own
  // kernel, where one is registered, always comes first).
  absl::InlinedVector<std::string_view, 8> families = formats;
  bool in_family = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].impl()->kernel_family().empty()) continue;
    families[i] = inputs[i].impl()->kernel_family();
    in_family = true;
  }
  if (const Kernel* k = !in_family || kernels == nullptr ? nullptr : find_in(*kernels, device, families)) {
    return run(*k, families);
  }

  bool all_dense = true;
  for (std::string_view f : formats) all_dense = all_dense && (f == "dense" || f == "none");
  COPPICE_CHECK(!all_dense, op, ": no kernel registered for (", str_join(formats, ", "), ") on ",
                device_type_name(device));

  std::string fallback = str_cat(op, "(", str_join(formats, ", "), ")");
  COPPICE_CHECK(!fallback_is_error_, op, ": no kernel for ", fallback, " on ", device_type_name(device),
                ", and dense fallbacks are errors in this run");
  std::vector<Tensor> dense_inputs = inputs;
  absl::InlinedVector<std::string_view, 8> dense_formats(formats.size(), "dense");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      dense_formats[i] = "none";
      continue;
    }
    if (inputs[i].is_dense()) continue;
    auto conv = to_dense_.find(std::string(formats[i]));
    if (conv == to_dense_.end()) conv = to_dense_.find(std::string(families[i]));
    COPPICE_CHECK(conv != to_dense_.end(), op, ": format '", formats[i], "' has no conversion to dense");
    dense_inputs[i] = conv->second(inputs[i]);
  }
  const Kernel* k = kernels == nullptr ? nullptr : find_in(*kernels, device, dense_formats);
  COPPICE_CHECK(k != nullptr, op, ": no kernel for ", fallback, " and no dense kernel to fall back to on ",
                device_type_name(device));
  count_fallback(fallback, device);
  if (DispatchObserver* o = current_dispatch_observer)
    o->on_kernel(str_cat(cell_text(op, dense_formats, device), " for (", str_join(formats, ", "), ")"));
  return (*k)(dense_inputs, attrs);
}

void Dispatcher::count_fallback(const std::string& fallback, DeviceType device) const {
  COPPICE_CHECK(!fallback_is_error_, "no kernel for ", fallback, " on ", device_type_name(device),
                ", and dense fallbacks are errors in this run");
  std::lock_guard<std::mutex> lock(fallbacks_mu_);
  if (fallbacks_[fallback]++ == 0) std::fprintf(stderr, "coppice: warning: %s falls back to dense\n", fallback.c_str());
}

bool any_sparse(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs) {
    if (t.defined() && t.is_sparse()) return true;
  }
  return false;
}

std::map<std::string, int64_t> Dispatcher::fallback_counts() const {
  std::lock_guard<std::mutex> lock(fallbacks_mu_);
  return fallbacks_;
}
void Dispatcher::reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(fallbacks_mu_);
  fallbacks_.clear();
}

}  // namespace coppice
