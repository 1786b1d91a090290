#include "optim/fused_step.h"

#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace coppice {
namespace {

// Ranks of the in-process backend step their optimizers from several
// threads at once.
struct Calls {
  std::mutex mu;
  std::map<std::string, int64_t, std::less<>> by_op;
};

Calls& calls() {
  static Calls c;
  return c;
}

}  // namespace

bool fused_step_applies(std::string_view op, const Tensor& p, std::initializer_list<const Tensor*> others) {
  if (!p.defined() || (p.dtype() != DType::kF32 && p.dtype() != DType::kF64)) return false;
  if (!p.is_dense() || !p.is_contiguous()) return false;
  for (const Tensor* t : others) {
    if (!t->defined() || !t->is_dense() || !t->is_contiguous() || t->dtype() != p.dtype() ||
        t->device() != p.device() || t->shape() != p.shape()) {
      return false;
    }
  }
  return Dispatcher::instance().has_kernel(op, p.device().type);
}

void run_fused_step(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  dispatch(op, inputs, attrs);
  Calls& c = calls();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_op.find(op);
  if (it == c.by_op.end()) it = c.by_op.emplace(std::string(op), 0).first;
  ++it->second;
}

int64_t fused_step_calls(std::string_view op) {
  Calls& c = calls();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_op.find(op);
  return it == c.by_op.end() ? 0 : it->second;
}

}  // namespace coppice
