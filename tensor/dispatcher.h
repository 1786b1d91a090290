// The op dispatcher: (op name, input formats, device) -> kernel.
//
// Op names are declared once (tensor/op_table.h, and the elementwise tables
// tensor/unary_ops.h, binary_ops.h); registering a kernel for an undeclared
// op, or for an input count the op's arity does not allow, is an error naming
// the op (at static initialization it stops the program), and so is a
// dispatch with a wrong input count.
//
// Every kernel has one boxed signature, (inputs, attributes) -> outputs, so
// that a format added later (sparse/, or a user's) plugs in by registering
// kernels under the same op names, and callers never change. A format of a
// family (TensorImpl::kernel_family: every format declared by its levels is
// of "levels") takes the kernels registered for its family where none is
// registered for itself. When no kernel
// matches and some input is not dense, the dispatcher converts those inputs to
// dense, runs the dense kernel and counts the fallback; fallbacks can be made
// errors (docs/architecture.md, "Dispatch, then fall back loudly").
//
// The hot path (call() finding a kernel) neither allocates nor locks: the op
// name is looked up without copying it, the formats are compared in place
// against the few kernels registered for that op and device, and attributes
// live inline. Registration happens at static initialization, before any
// call; the fallback counters, off the hot path, take a lock.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "tensor/op_table.h"
#include "tensor/tensor.h"

namespace coppice {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

// Named, typed op attributes (dim, keepdim, eps, ...). Getters throw naming
// the attribute when it is missing or has another type; frontends set every
// attribute their kernels read, so this only fires on a kernel/frontend bug.
// An op has a handful: they are kept inline, in the order set, and found by
// a linear scan (names are short enough for std::string's inline buffer).
class Attrs {
 public:
  Attrs() = default;
  Attrs& set(std::string_view name, AttrValue value);
  bool has(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_double(std::string_view name) const;  // ints convert
  bool get_bool(std::string_view name) const;
  const std::string& get_string(std::string_view name) const;
  const std::vector<int64_t>& get_ints(std::string_view name) const;
  // Every attribute set, in the order set (the dispatcher checks them
  // against the op's declaration).
  absl::Span<const std::pair<std::string, AttrValue>> entries() const { return values_; }
  int64_t get_int(std::string_view name, int64_t fallback) const;
  double get_double(std::string_view name, double fallback) const;
  bool get_bool(std::string_view name, bool fallback) const;

 private:
  const AttrValue* lookup(std::string_view name) const;
  const AttrValue& find(std::string_view name) const;
  absl::InlinedVector<std::pair<std::string, AttrValue>, 4> values_;
};

using Kernel = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Attrs& attrs)>;

// Converts a tensor of some format to dense (registered per format by sparse/).
using ToDense = std::function<Tensor(const Tensor&)>;

class Dispatcher {
 public:
  static Dispatcher& instance();

  // `formats` has one entry per input ("dense", "csr", ...); "*" matches any
  // format. `op` must be declared (find_op) and take formats.size() inputs.
  void register_kernel(const std::string& op, DeviceType device, std::vector<std::string> formats, Kernel kernel);
  void register_to_dense(std::string format, ToDense fn);

  // The kernel for exactly these formats (else one registered for "*" in
  // every position), or nullptr.
  const Kernel* find(std::string_view op, DeviceType device, absl::Span<const std::string_view> formats) const;
  bool has_kernel(std::string_view op, DeviceType device) const;

  // One registered (op, device, input formats) cell.
  struct Cell {
    std::string op;
    DeviceType device;
    std::vector<std::string> formats;
  };
  // Every registered cell, sorted by op, device and formats: what the parity
  // harnesses (tests/sparse/*_parity_test) sweep, so that no cell goes
  // untested. Not for the hot path (it copies).
  std::vector<Cell> cells() const;

  // Runs `op` on `inputs` (undefined tensors are allowed for optional inputs
  // and match the format "none"). All defined inputs must share a device;
  // their count must be one the op's arity allows, and every attribute one
  // the op declares, of its declared type (an int where a double is
  // declared converts, as Attrs' getters do).
  std::vector<Tensor> call(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) const;

  // Dense fallbacks taken so far, by "op(format, format)".
  std::map<std::string, int64_t> fallback_counts() const;
  // Counts a dense fallback that a composite op (einsum, ...) takes on its
  // own, `fallback` its "op(format, format)": a warning on its first time,
  // and an error naming it and `device` when fallbacks are errors.
  void count_fallback(const std::string& fallback, DeviceType device) const;
  void reset_fallback_counts();
  // When true, a fallback throws instead of running.
  void set_fallback_is_error(bool on) { fallback_is_error_ = on; }
  bool fallback_is_error() const { return fallback_is_error_; }

 private:
  Dispatcher() = default;

  struct Registered {
    std::vector<std::string> formats;  // one per input; all "*": any formats
    Kernel kernel;
  };
  static constexpr size_t kDeviceTypes = 2;  // DeviceType::kCpu, kCuda
  // Per op name: its arity (copied from its declaration, so that a call
  // checks its input count without looking the table up) and, per device
  // type, its kernels (a few, scanned in order).
  struct OpKernels {
    const OpSpec* spec = nullptr;  // the op's declaration (stable: find_op's)
    size_t min_inputs = 0, max_inputs = 0;
    std::array<std::vector<Registered>, kDeviceTypes> by_device;
  };
  const OpKernels* lookup(std::string_view op) const;
  static const Kernel* find_in(const OpKernels& kernels, DeviceType device, absl::Span<const std::string_view> formats);

  absl::flat_hash_map<std::string, OpKernels> kernels_;
  absl::flat_hash_map<std::string, ToDense> to_dense_;
  // Ranks of the in-process backend dispatch from several threads at once.
  mutable std::mutex fallbacks_mu_;
  mutable std::map<std::string, int64_t> fallbacks_;
  bool fallback_is_error_ = false;
};

// Static registration: `static KernelRegistrar r(op::kMatmul, DeviceType::kCpu, {"dense", "dense"}, fn);`
// Libraries holding registrars are built with alwayslink so the linker keeps them.
struct KernelRegistrar {
  KernelRegistrar(std::string op, DeviceType device, std::vector<std::string> formats, Kernel kernel) {
    Dispatcher::instance().register_kernel(op, device, std::move(formats), std::move(kernel));
  }
};

// True when any defined input is not dense. Frontends then skip their
// dense-only checks and dispatch by format: to a registered kernel, or to the
// counted dense fallback (which throws, naming the format, when the format
// has no conversion to dense).
bool any_sparse(const std::vector<Tensor>& inputs);

// Shorthand for the common case.
inline std::vector<Tensor> dispatch(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  return Dispatcher::instance().call(op, inputs, attrs);
}

}  // namespace coppice
