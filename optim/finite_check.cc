// Non-finite values (finite_check.h): the CPU kernel of "nonfinite_flag" and
// what is built on it.
#include "optim/finite_check.h"

#include <atomic>
#include <cstring>
#include <limits>

#include "optim/finite_check_math.h"
#include "sparse/masked.h"
#include "sparse/sparse_impl.h"
#include "tensor/cpu/parallel.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// 16 bytes of words, as GCC's and Clang's vector extensions give them: the
// test below runs on whole vectors (SSE on the project's x86-64-v2), which
// the compiler does not do by itself at -O2 for a loop that reads bytes.
typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x4 __attribute__((vector_size(16)));
typedef uint64_t U64x2 __attribute__((vector_size(16)));

// Whether any of the n words at `data` (values of the width of Word, read
// bytewise: the storage holds floats) has `mask`'s bits all set: four
// vectors at a time OR-ed into one, the tail word by word. Big tensors are
// split over the CPU pool.
template <typename Word, typename Vec>
bool any_nonfinite_words(const unsigned char* data, int64_t n, Word mask) {
  constexpr int64_t kLanes = static_cast<int64_t>(sizeof(Vec) / sizeof(Word));
  std::atomic<bool> found{false};
  cpu::parallel_for(0, n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    const Vec m = Vec{} + mask;
    Vec hit = {};
    int64_t i = begin;
    for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
      Vec v[4];
      std::memcpy(v, data + i * static_cast<int64_t>(sizeof(Word)), sizeof v);
      for (const Vec& x : v) hit |= reinterpret_cast<Vec>((x & m) == m);
    }
    bool any = false;
    for (int64_t l = 0; l < kLanes; ++l) any = any || hit[l] != 0;
    for (; i < end; ++i) {
      Word w;
      std::memcpy(&w, data + i * static_cast<int64_t>(sizeof(Word)), sizeof(Word));
      any = any || is_nonfinite_bits<Word>(w, mask);
    }
    if (any) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

// Inputs: the values (dense, contiguous, floating) and the flag (an f32
// scalar on the same device, possibly a view into a vector of flags), which
// becomes NaN when a value is inf or NaN.
std::vector<Tensor> nonfinite_flag_cpu_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor& v = in[0];
  const auto* data = static_cast<const unsigned char*>(v.data_ptr());
  const int64_t n = v.numel();
  bool found = false;
  switch (v.dtype()) {
    case DType::kF32: found = any_nonfinite_words<uint32_t, U32x4>(data, n, kF32ExponentBits); break;
    case DType::kF64: found = any_nonfinite_words<uint64_t, U64x2>(data, n, kF64ExponentBits); break;
    case DType::kBF16: found = any_nonfinite_words<uint16_t, U16x8>(data, n, kBF16ExponentBits); break;
    case DType::kF16: found = any_nonfinite_words<uint16_t, U16x8>(data, n, kF16ExponentBits); break;
    default: fail("nonfinite_flag: values must be f32, f64, bf16 or f16, got ", dtype_name(v.dtype()));
  }
  if (found) *in[1].data<float>() = std::numeric_limits<float>::quiet_NaN();
  return {};
}

const KernelRegistrar kCpu(op::kNonfiniteFlag, DeviceType::kCpu, {"dense", "dense"}, nonfinite_flag_cpu_kernel);

}  // namespace

NonfiniteFlag::NonfiniteFlag(int64_t slots) : slots_(slots) {
  COPPICE_CHECK(slots >= 1, "NonfiniteFlag: needs at least one slot, got ", slots);
}

void NonfiniteFlag::add(const Tensor& t, int64_t slot) {
  COPPICE_CHECK(slot >= 0 && slot < slots_, "NonfiniteFlag: slot ", slot, " is outside [0, ", slots_, ")");
  if (!t.defined()) return;
  Tensor v = stored_values(t);
  if (v.numel() == 0 || !is_floating(v.dtype())) return;
  if (!v.is_contiguous()) v = v.contiguous();
  if (!flags_.defined()) flags_ = zeros({slots_}, TensorOptions(DType::kF32, v.device()));
  if (v.device() != flags_.device()) {
    // A flag of its own there, copied over and folded in (a scalar's copy;
    // still no host read).
    NonfiniteFlag there;
    there.add(v);
    v = there.value().to(flags_.device());
  }
  dispatch(op::kNonfiniteFlag, {v, flags_.select(0, slot)});
}

Tensor NonfiniteFlag::slot_on(int64_t slot, Device device) {
  COPPICE_CHECK(slot >= 0 && slot < slots_, "NonfiniteFlag: slot ", slot, " is outside [0, ", slots_, ")");
  if (!flags_.defined()) flags_ = zeros({slots_}, TensorOptions(DType::kF32, device));
  if (flags_.device() != device) return Tensor();
  return flags_.select(0, slot);
}

void NonfiniteFlag::add_gradients(const std::vector<Variable>& params, int64_t slot) {
  for (const Variable& p : params) {
    if (p.defined()) add(p.grad(), slot);
  }
}

bool NonfiniteFlag::all_finite() const {
  if (!flags_.defined()) return true;
  for (float f : flags_.to(Device::cpu()).to_vector<float>()) {
    if (f != 0.0f) return false;
  }
  return true;
}

bool all_finite(const Tensor& t) {
  NonfiniteFlag flag;
  flag.add(t);
  return flag.all_finite();
}

void check_finite(const Tensor& t, std::string_view op, std::string_view what, std::string_view why) {
  if (all_finite(t)) return;
  throw NonfiniteError(str_cat(op, ": ", what, " holds non-finite values (inf or NaN)", why));
}

void check_finite_scores(const Tensor& scores, std::string_view op, std::string_view what) {
  check_finite(scores, op, what, "; refusing to rank by them");
}

std::string first_nonfinite_gradient(const std::vector<Variable>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Variable& p = params[i];
    if (!p.defined() || all_finite(p.grad())) continue;
    return p.name().empty() ? str_cat("parameter ", i) : p.name();
  }
  return "";
}

}  // namespace coppice
