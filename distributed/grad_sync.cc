#include "distributed/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <set>
#include <string_view>

#include "autograd/functions/sparse.h"
#include "autograd/gradient_destination.h"
#include "autograd/sparse_grad.h"
#include "sparse/sparse_impl.h"
#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// Where a fresh tensor's data starts on `device`: a dense leaf's slice of
// its bucket starts there too, because cuBLAS picks its kernel by the
// output's alignment as well, so that the product written into the slice
// has the bits of one written into a fresh tensor.
size_t fresh_alignment(Device device) { return device.is_cuda() ? kCudaAllocationAlignment : kCpuAllocationAlignment; }

// How one leaf's gradient travels.
enum class Route : uint8_t {
  kDense,      // the whole gradient, in an all-reduced bucket
  kCompact,    // a sparse leaf's values only, in an all-reduced bucket
  kDensified,  // a sparse leaf's gradient made dense, in an all-reduced bucket
  kTopK,       // the k largest entries of gradient + residual, all-gathered
};

bool is_compact(Route r) { return r == Route::kCompact || r == Route::kDensified; }

// Adds its own lifetime, in seconds, to `total` (an exception included).
class HostTimer {
 public:
  explicit HostTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~HostTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  HostTimer(const HostTimer&) = delete;
  HostTimer& operator=(const HostTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

// One line per leaf: what begin() compares across ranks.
std::string describe_leaf(const std::string& name, const Tensor& value) {
  std::string s =
      str_cat("'", name, "' ", dtype_name(value.dtype()), " ", shape_to_string(value.shape()), " ", value.format());
  if (value.is_sparse()) s += str_cat(" (", values(value).numel(), " stored values)");
  return s;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  size_t start = 0;
  while (true) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

// The first disagreement between two ranks' leaf lists, or empty.
std::string leaf_list_mismatch(const std::vector<std::string>& base, const std::vector<std::string>& other,
                               int other_rank) {
  const size_t common = std::min(base.size(), other.size());
  for (size_t i = 0; i < common; ++i) {
    if (base[i] != other[i]) {
      return str_cat("leaf #", i, " is ", base[i], " on rank 0 but ", other[i], " on rank ", other_rank);
    }
  }
  if (base.size() == other.size()) return {};
  const bool rank0_longer = base.size() > other.size();
  return str_cat("rank 0 passes ", base.size(), " leaves and rank ", other_rank, " passes ", other.size(), "; leaf #",
                 common, " ", rank0_longer ? base[common] : other[common], " on rank ", rank0_longer ? 0 : other_rank,
                 " has no counterpart on rank ", rank0_longer ? other_rank : 0);
}

}  // namespace

struct GradientSync::Impl {
  // One leaf and where its gradient goes.
  struct Slot {
    std::string name;
    Variable leaf;
    Route route = Route::kDense;
    Shape shape;
    DType dtype = DType::kF32;
    Device device = Device::cpu();
    std::string format;
    uint64_t pattern_version = 0;
    Shape values_shape;  // kCompact: the shape of the leaf's values part
    int64_t numel = 0;   // elements it sends (values for kCompact, all for the others)
    size_t bucket = 0;
    int64_t offset = 0;  // in its bucket's flat buffer
    int64_t topk_k = 0;  // kTopK
    // This pass.
    bool arrived = false;
    HookId hook = 0;
    bool hooked = false;
    // This pass's gradient as the flat elements it sends (kTopK: a copy of
    // its own; otherwise a view, copied into the bucket when the bucket is
    // issued), unless backward wrote it into the bucket itself.
    Tensor sent;
    bool in_bucket = false;
    // kDense: its slice of the bucket, offered to backward as the leaf's
    // gradient destination (gradient_destination.h).
    Tensor destination;
  };

  // Leaves exchanged by one collective (or, for a top-k leaf, a pair of
  // all-gathers), issued in index order.
  struct Bucket {
    std::vector<size_t> members;  // slot indices
    bool topk = false;
    DType dtype = DType::kF32;
    Device device = Device::cpu();
    int64_t numel = 0;
    // This pass: its members' gradients side by side, made fresh by begin()
    // (the last pass's gradients are views of the old one). Backward writes
    // what it can into it (a dense linear's weight gradient); the rest is
    // copied in when it is issued, by one launch (copy_into_at).
    Tensor flat;
    size_t arrived = 0;
    bool issued = false;
    std::vector<Work> works;
  };

  explicit Impl(GradientSync& owner) : owner(owner) {}

  GradientSync& owner;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  size_t next_to_issue = 0;
  bool active = false;
  // Hooks may in principle run on engine threads; the communicator is used
  // from one thread at a time.
  std::mutex mutex;

  Communicator& comm() { return owner.comm_; }
  const GradSyncOptions& options() const { return owner.options_; }
  GradSyncStats& stats() { return owner.stats_; }

  // ---- layout (once per distinct leaf list) --------------------------------

  // True when `leaves` are the leaves of the current layout, unchanged
  // (same variables, shapes, dtypes, formats and pattern versions).
  bool same_leaves(const NamedLeaves& leaves) const {
    if (leaves.size() != slots.size()) return false;
    for (size_t i = 0; i < leaves.size(); ++i) {
      const Slot& s = slots[i];
      const auto& [name, leaf] = leaves[i];
      if (!leaf.defined() || name != s.name || !leaf.is_same(s.leaf)) return false;
      const Tensor& v = leaf.value();
      if (v.shape() != s.shape || v.dtype() != s.dtype || v.device() != s.device || v.format() != s.format ||
          pattern_version(v) != s.pattern_version) {
        return false;
      }
    }
    return true;
  }

  Route route_for(const Tensor& value) const {
    if (value.is_sparse()) return options().compact_sparse ? Route::kCompact : Route::kDensified;
    const bool topk = options().topk_fraction > 0 && value.numel() >= std::max<int64_t>(options().topk_min_numel, 1);
    return topk ? Route::kTopK : Route::kDense;
  }

  static void check_leaf(const std::string& name, const Variable& leaf) {
    COPPICE_CHECK(!name.empty(), "GradientSync::begin: a leaf without a name (names key buckets and residuals)");
    COPPICE_CHECK(leaf.defined(), "GradientSync::begin: leaf '", name, "' is an undefined Variable");
    COPPICE_CHECK(leaf.is_leaf(), "GradientSync::begin: '", name, "' is not a leaf (it was computed by ",
                  leaf.grad_fn() ? leaf.grad_fn()->name() : std::string("?"), ")");
    COPPICE_CHECK(leaf.requires_grad(), "GradientSync::begin: leaf '", name, "' does not require grad");
  }

  // On any error the layout is left empty, so that the next begin() builds
  // (and checks) it again.
  void build_layout(const NamedLeaves& leaves) {
    slots.clear();
    buckets.clear();
    try {
      build_slots(leaves);
      assign_buckets();
      check_leaves_agree(leaves);
    } catch (...) {
      slots.clear();
      buckets.clear();
      throw;
    }
    keep_residuals();
  }

  void build_slots(const NamedLeaves& leaves) {
    std::set<std::string> names;
    std::vector<Variable> seen;
    for (const auto& [name, leaf] : leaves) {
      check_leaf(name, leaf);
      COPPICE_CHECK(names.insert(name).second, "GradientSync::begin: leaf name '", name, "' appears twice");
      for (const Variable& v : seen) {
        COPPICE_CHECK(!v.is_same(leaf), "GradientSync::begin: leaf '", name, "' is passed twice (also as '", v.name(),
                      "')");
      }
      seen.push_back(leaf);
      Slot s;
      s.name = name;
      s.leaf = leaf;
      const Tensor& v = leaf.value();
      s.route = route_for(v);
      s.shape = v.shape();
      s.dtype = v.dtype();
      s.device = v.device();
      s.format = std::string(v.format());
      s.pattern_version = pattern_version(v);
      if (s.route == Route::kCompact) s.values_shape = values(v).shape();
      s.numel = s.route == Route::kCompact ? values(v).numel() : v.numel();
      if (s.route == Route::kTopK) {
        const double k = std::ceil(options().topk_fraction * static_cast<double>(s.numel));
        s.topk_k = std::clamp<int64_t>(static_cast<int64_t>(k), 1, s.numel);
      }
      slots.push_back(std::move(s));
    }
  }

  // Leaves in reverse order (roughly the order backward reaches them); a new
  // bucket when the dtype or device changes or bucket_bytes would be passed.
  void assign_buckets() {
    const int64_t cap = options().bucket_bytes;
    int64_t open_bytes = 0;
    bool open = false;
    for (size_t i = slots.size(); i-- > 0;) {
      Slot& s = slots[i];
      const int64_t bytes = s.numel * static_cast<int64_t>(dtype_size(s.dtype));
      if (s.route == Route::kTopK) {
        Bucket b;
        b.topk = true;
        b.dtype = s.dtype;
        b.device = s.device;
        b.numel = s.numel;
        b.members.push_back(i);
        s.bucket = buckets.size();
        buckets.push_back(std::move(b));
        open = false;
        continue;
      }
      const bool fits =
          open && buckets.back().dtype == s.dtype && buckets.back().device == s.device && open_bytes + bytes <= cap;
      if (!fits) {
        Bucket b;
        b.dtype = s.dtype;
        b.device = s.device;
        buckets.push_back(std::move(b));
        open = true;
        open_bytes = 0;
      }
      Bucket& b = buckets.back();
      s.bucket = buckets.size() - 1;
      // A dense leaf's slice starts where a fresh tensor would (padded to
      // the device's allocation alignment), so that backward can write its
      // gradient there; the padding is all-reduced with the rest, never read.
      const int64_t step =
          s.route == Route::kDense ? std::max<int64_t>(1, fresh_alignment(s.device) / dtype_size(s.dtype)) : 1;
      const int64_t padding = (step - b.numel % step) % step;
      s.offset = b.numel + padding;
      b.numel = s.offset + s.numel;
      b.members.push_back(i);
      open_bytes += bytes + padding * static_cast<int64_t>(dtype_size(s.dtype));
    }
  }

  // One all_gather_v of every leaf's description; every rank compares every
  // rank's list with rank 0's and throws the same message.
  void check_leaves_agree(const NamedLeaves& leaves) {
    std::string text;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (i) text += '\n';
      text += describe_leaf(leaves[i].first, leaves[i].second.value());
    }
    const Device device = slots.empty() ? Device::cpu() : slots.front().device;
    std::vector<uint8_t> bytes(text.begin(), text.end());
    Tensor mine = from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())}).to(device);
    Work w = comm().all_gather_v(mine);
    w.wait();
    const std::vector<uint8_t> all = w.result().to(Device::cpu()).to_vector<uint8_t>();
    const std::vector<int64_t>& sizes = w.sizes();
    std::vector<std::vector<std::string>> lists;
    size_t at = 0;
    for (int64_t n : sizes) {
      lists.push_back(split_lines(std::string(all.begin() + at, all.begin() + at + n)));
      at += static_cast<size_t>(n);
    }
    for (size_t r = 1; r < lists.size(); ++r) {
      const std::string why = leaf_list_mismatch(lists[0], lists[r], static_cast<int>(r));
      COPPICE_CHECK(why.empty(), "GradientSync::begin: ranks pass different leaves: ", why);
    }
  }

  // Top-k leaves keep their residual across layouts when it still fits.
  void keep_residuals() {
    std::map<std::string, Tensor> kept;
    for (const Slot& s : slots) {
      if (s.route != Route::kTopK) continue;
      auto it = owner.residuals_.find(s.name);
      const bool fits = it != owner.residuals_.end() && it->second.shape() == s.shape &&
                        it->second.dtype() == s.dtype && it->second.device() == s.device;
      kept[s.name] = fits ? it->second : zeros(s.shape, {s.dtype, s.device});
    }
    owner.residuals_ = std::move(kept);
  }

  // ---- one pass ------------------------------------------------------------

  void start_pass() {
    next_to_issue = 0;
    for (Bucket& b : buckets) {
      // A fresh buffer each pass: the previous pass's grads are views of the old one.
      b.flat = b.topk ? Tensor() : empty({b.numel}, {b.dtype, b.device});
      b.arrived = 0;
      b.issued = false;
      b.works.clear();
    }
    for (Slot& s : slots) {
      s.arrived = false;
      s.in_bucket = false;
      s.sent = Tensor();
      s.destination = Tensor();
      if (s.route == Route::kDense) s.destination = buckets[s.bucket].flat.narrow(0, s.offset, s.numel).view(s.shape);
    }
    owner.stats_ = GradSyncStats();
    owner.stats_.buckets = static_cast<int64_t>(buckets.size());
  }

  void register_hooks() {
    try {
      for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if (s.destination.defined()) s.leaf.set_grad_destination(s.destination);
        // After accumulation, so that the gradient is stored as backward
        // made it: held here from a hook before, it would be stored as a copy.
        s.hook = s.leaf.register_post_accumulate_hook([this, i](const Tensor& grad) { on_gradient(i, grad); });
        s.hooked = true;
      }
    } catch (...) {
      remove_hooks();
      throw;
    }
  }

  // And the gradient destinations: backward outside begin() and end() must
  // not write into a bucket.
  void remove_hooks() noexcept {
    for (Slot& s : slots) {
      if (s.hooked) s.leaf.remove_hook(s.hook);
      s.hooked = false;
      const Tensor& set = s.leaf.grad_destination();
      if (s.destination.defined() && set.defined() && set.data_ptr() == s.destination.data_ptr()) {
        s.leaf.set_grad_destination(Tensor());
      }
    }
  }

  // The gradient as the flat elements this leaf sends, in the leaf's dtype.
  Tensor payload(const Slot& s, const Tensor& grad) const {
    COPPICE_CHECK(grad.shape() == s.shape, "GradientSync: the gradient of leaf '", s.name, "' has shape ",
                  shape_to_string(grad.shape()), ", expected ", shape_to_string(s.shape));
    Tensor flat = flat_values(s, grad);
    return flat.dtype() == s.dtype ? flat : flat.to(s.dtype);
  }

  Tensor flat_values(const Slot& s, const Tensor& grad) const {
    if (s.route != Route::kCompact) return to_dense(grad).reshape({-1});
    // A sparse leaf's gradient arrives projected onto its pattern (AccumulateGrad);
    // a different pattern means the mask changed inside the step.
    COPPICE_CHECK(pattern_version(s.leaf.value()) == s.pattern_version, "GradientSync: the pattern of leaf '", s.name,
                  "' changed between begin() and backward (mask updates go after end())");
    if (grad.is_sparse()) {
      COPPICE_CHECK(grad.format() == s.format && pattern_version(grad) == s.pattern_version,
                    "GradientSync: the gradient of sparse leaf '", s.name, "' (", grad.format(), ", pattern version ",
                    pattern_version(grad), ") does not have the leaf's pattern (", s.format, ", pattern version ",
                    s.pattern_version, ")");
      return values(grad).reshape({-1});
    }
    // A dense gradient is sampled at the leaf's stored positions.
    return grad_values(grad, s.leaf.value(), "GradientSync").reshape({-1});
  }

  // `grad`: the leaf's gradient once backward has accumulated it.
  void on_gradient(size_t index, const Tensor& grad) {
    std::lock_guard<std::mutex> lock(mutex);
    const HostTimer timer(stats().hook_seconds);
    Slot& s = slots[index];
    COPPICE_CHECK(!s.arrived, "GradientSync: leaf '", s.name, "' got a second gradient between begin() and end() ",
                  "(one backward pass per step is supported)");
    arrive(s, grad);
    issue_ready(/*during_backward=*/true);
  }

  // Takes what leaf `s` sends: `grad` (undefined: zeros).
  void arrive(Slot& s, const Tensor& grad) {
    Bucket& b = buckets[s.bucket];
    if (!grad.defined()) {
      if (!b.topk) s.sent = zeros({s.numel}, {s.dtype, s.device});
    } else if (s.route == Route::kTopK) {
      s.sent = empty({s.numel}, {s.dtype, s.device});
      s.sent.copy_(payload(s, grad));
    } else if (is_written_into(grad, s.destination)) {
      s.in_bucket = true;
    } else {
      // Held, not copied: the gradient stays as backward left it until
      // end() replaces it, and the bucket is filled when it is issued.
      s.sent = payload(s, grad);
    }
    s.arrived = true;
    ++b.arrived;
  }

  // Issues, in bucket order, every bucket whose members have all arrived.
  void issue_ready(bool during_backward) {
    while (next_to_issue < buckets.size() && buckets[next_to_issue].arrived == buckets[next_to_issue].members.size()) {
      issue(buckets[next_to_issue++], during_backward);
    }
  }

  void issue(Bucket& b, bool during_backward) {
    b.issued = true;
    if (b.topk) {
      issue_topk(b, during_backward);
      return;
    }
    std::vector<Tensor> pieces;
    std::vector<int64_t> offsets;
    GradSyncStats& st = stats();
    for (size_t i : b.members) {
      Slot& s = slots[i];
      if (s.in_bucket) continue;
      st.copied_bytes += s.numel * static_cast<int64_t>(dtype_size(s.dtype));
      pieces.push_back(s.sent.contiguous());
      offsets.push_back(s.offset);
      s.sent = Tensor();
    }
    copy_into_at(b.flat, pieces, offsets);
    b.works.push_back(comm().all_reduce(b.flat, ReduceOp::kAverage));
    for (size_t i : b.members) {
      const Slot& s = slots[i];
      const int64_t bytes = s.numel * static_cast<int64_t>(dtype_size(s.dtype));
      (is_compact(s.route) ? st.compact_bytes : st.dense_bytes) += bytes;
      st.bytes += bytes;
    }
    ++st.collectives;
    if (during_backward) ++st.collectives_during_backward;
  }

  // Sends the k largest-magnitude entries of gradient + residual and keeps
  // the rest as the new residual (error feedback).
  void issue_topk(Bucket& b, bool during_backward) {
    Slot& s = slots[b.members.front()];
    Tensor& residual = owner.residuals_.at(s.name);
    Tensor acc = residual.reshape({-1}).clone();
    if (s.sent.defined()) acc = add(acc, s.sent);
    Tensor indices = topk(abs(acc), s.topk_k, 0).indices;
    Tensor sent = gather(acc, 0, indices);
    // x + (-x) is exactly 0, so the residual is exactly what was not sent.
    residual = scatter_add(acc, 0, indices, neg(sent)).view(s.shape);
    s.sent = Tensor();
    b.works.push_back(comm().all_gather(indices));
    b.works.push_back(comm().all_gather(sent));
    GradSyncStats& st = stats();
    const int64_t bytes = s.topk_k * static_cast<int64_t>(dtype_size(DType::kI64) + dtype_size(s.dtype));
    st.topk_bytes += bytes;
    st.bytes += bytes;
    st.collectives += 2;
    if (during_backward) st.collectives_during_backward += 2;
  }

  // Leaves that backward did not reach send the gradient they hold (zeros
  // when none); every remaining bucket is issued.
  void issue_remaining() {
    for (size_t bi = next_to_issue; bi < buckets.size(); ++bi) {
      for (size_t i : buckets[bi].members) {
        Slot& s = slots[i];
        if (!s.arrived) arrive(s, s.leaf.grad());
      }
    }
    issue_ready(/*during_backward=*/false);
  }

  // The device's next work waits for every exchange; the host does not
  // (Work::wait_on_device), so that it queues clipping and the optimizer
  // while the last buckets are still being reduced. Waiting here drained the
  // GPU's queue every step: 0.65 ms idle after the last all-reduce on 2
  // H200s (docs/benchmarks.md, issue 37).
  void order_after_exchange() {
    for (Bucket& b : buckets) {
      for (Work& w : b.works) w.wait_on_device();
    }
  }

  void install_grads() {
    const double world = static_cast<double>(comm().world_size());
    for (Slot& s : slots) {
      const Bucket& b = buckets[s.bucket];
      if (s.route == Route::kTopK) {
        // Every rank's sent entries, summed in rank order, divided by world size.
        Tensor sum = scatter_add(zeros({s.numel}, {s.dtype, s.device}), 0, b.works[0].result(), b.works[1].result());
        s.leaf.set_grad(div(sum, world).view(s.shape));
        continue;
      }
      Tensor slice = b.flat.narrow(0, s.offset, s.numel);
      if (s.route == Route::kCompact) {
        COPPICE_CHECK(pattern_version(s.leaf.value()) == s.pattern_version, "GradientSync::end: the pattern of leaf '",
                      s.name, "' changed during the step");
        s.leaf.set_grad(with_values(s.leaf.value(), slice.view(s.values_shape)));
      } else {
        // kDensified: set_grad projects the dense average onto the leaf's pattern.
        s.leaf.set_grad(slice.view(s.shape));
      }
    }
  }
};

GradientSync::GradientSync(Communicator& comm, GradSyncOptions options)
    : comm_(comm), options_(options), impl_(std::make_unique<Impl>(*this)) {
  COPPICE_CHECK(options_.bucket_bytes > 0, "GradientSync: bucket_bytes must be positive, got ", options_.bucket_bytes);
  COPPICE_CHECK(options_.topk_fraction >= 0 && options_.topk_fraction <= 1,
                "GradientSync: topk_fraction must be in [0, 1] (0: off), got ", options_.topk_fraction);
  COPPICE_CHECK(options_.topk_min_numel >= 0, "GradientSync: topk_min_numel must be >= 0, got ",
                options_.topk_min_numel);
}

GradientSync::~GradientSync() {
  if (impl_) impl_->remove_hooks();
}

void GradientSync::begin(const NamedLeaves& leaves) {
  COPPICE_CHECK(!impl_->active, "GradientSync::begin: the previous begin() was not ended (call end() after backward)");
  if (!impl_->same_leaves(leaves)) impl_->build_layout(leaves);
  impl_->start_pass();
  impl_->register_hooks();
  impl_->active = true;
}

void GradientSync::end() {
  COPPICE_CHECK(impl_->active, "GradientSync::end: no begin() to end");
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const HostTimer timer(stats_.end_seconds);
  // Hooks go first, so that a failure leaves no hook behind and the next begin() starts clean.
  impl_->remove_hooks();
  impl_->active = false;
  impl_->issue_remaining();
  impl_->order_after_exchange();
  impl_->install_grads();
}

}  // namespace coppice
