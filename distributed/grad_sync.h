// Data-parallel gradient exchange (docs/architecture.md, layer 6): after one
// backward pass every rank holds the average over ranks of each leaf's
// gradient, with the exchange overlapped with the backward pass.
//
// Use, once per step:
//   sync.begin(leaves);   // makes the buckets, registers a hook on every leaf
//   loss.backward();      // as each leaf's gradient is accumulated, its hook
//                         // adds it to its bucket; a full bucket is filled
//                         // and all-reduced at once, while backward goes on
//   sync.end();           // each leaf's grad is now the average over ranks,
//                         // for the work queued after it; hooks are removed
//
// Each leaf sends its gradient as backward leaves it: accumulated onto any
// gradient it held before begin() (as DDP reads param.grad; the trainer sets
// gradients to none first). The hooks run after accumulation
// (Variable::register_post_accumulate_hook), so the gradients are stored as
// the backward ops made them, not copied. A dense leaf with no gradient yet
// gets its slice of its bucket as its gradient destination
// (Variable::set_grad_destination), so a dense linear's weight gradient is
// written into the bucket by its product (DDP's gradient_as_bucket_view);
// the other gradients are copied in when the bucket is issued, one launch a
// bucket (GradSyncStats::copied_bytes counts them). After end() every
// gradient it exchanged is a view of its bucket. The buckets are made by
// begin(), so the gradients' memory is held from then on (through the
// forward pass, where begin() comes first), as DDP's buckets are held. A
// dense leaf's slice starts where a fresh tensor would, at its device's
// allocation alignment (tensor/allocator.h: 64 bytes on the CPU, 256 on a
// GPU; the padding between slices travels with them, unread), so that the
// product there is the one a fresh tensor gets, the same bits.
//
// What travels, per leaf:
//   * a dense leaf: its gradient, in buckets of about bucket_bytes (leaves in
//     the reverse of the order given, which is roughly the order backward
//     reaches them; one dtype per bucket), all-reduced (average);
//   * a sparse leaf (any format): its gradient holds the leaf's pattern, which
//     is the same on every rank, so only the nnz values travel (compact) and
//     bytes fall with density. With compact_sparse = false the gradient is
//     densified and exchanged as a dense one (a baseline for benchmarks);
//   * with topk_fraction > 0, a dense leaf of at least topk_min_numel
//     elements sends only its k = ceil(fraction * numel) largest-magnitude
//     entries of (gradient + residual) (all-gather of indices and values) and
//     keeps what it did not send as its residual for the next step (error
//     feedback; Stich et al. 2018). The result is the sum of every rank's
//     sent entries divided by world_size, on every rank alike.
// Buckets are issued in a fixed order (bucket 0 first), so every rank issues
// the same collectives in the same order whatever order hooks fire in.
//
// Every rank must pass the same leaves (names, shapes, dtypes, formats and
// sparse patterns) in the same order; begin() checks names, shapes, dtypes,
// formats and value counts cheaply (one all_gather_v of the leaves'
// descriptions per distinct leaf list: a list is new when a leaf, or its
// shape, format or pattern version, changes; ranks change theirs together)
// and throws coppice::Error, on every rank, naming the first leaf that
// differs and the ranks. A leaf that backward did not reach contributes the
// gradient it holds, zeros when none (and still gets the average: others may
// have had one);
// its bucket, and every bucket after it, then waits for end() (list such
// leaves first, so that their buckets come last). Gradients accumulated over
// several backward passes between begin() and end() are not supported: the
// hook fires once per backward, and a second gradient throws. After a
// backward pass that threw, call end() (it throws too when a collective
// failed) or destroy the GradientSync before the next begin().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "distributed/communicator.h"
#include "tensor/tensor.h"

namespace coppice {

struct GradSyncOptions {
  int64_t bucket_bytes = 25ll << 20;  // dense buckets (PyTorch DDP's default)
  bool compact_sparse = true;         // sparse leaves send nnz values only
  double topk_fraction = 0.0;         // (0, 1]: top-k with error feedback for dense leaves; 0: off
  int64_t topk_min_numel = 4096;      // smaller dense leaves are all-reduced whole
};

// What this rank sent in the last exchange (payload bytes handed to the
// collectives: an all-reduce of n bytes counts n, an all-gather of n bytes
// from this rank counts n). Reset by begin() and counted as collectives are
// issued, so that a hook running during backward sees the exchange so far.
struct GradSyncStats {
  int64_t bytes = 0;          // all of it
  int64_t dense_bytes = 0;    // dense leaves' gradients
  int64_t compact_bytes = 0;  // sparse leaves' values (or their densified gradients)
  int64_t topk_bytes = 0;     // top-k indices and values
  int64_t collectives = 0;
  int64_t buckets = 0;  // buckets in the layout (a top-k leaf is a bucket of its own)
  // Gradients copied into the all-reduced buckets: those backward did not
  // write there itself (the rest of dense_bytes + compact_bytes was).
  int64_t copied_bytes = 0;
  // Collectives issued from gradient hooks, i.e. while backward was running
  // (the overlap); the rest were issued by end().
  int64_t collectives_during_backward = 0;
  // Host time (a steady clock, no device synchronization) in this
  // exchange's gradient hooks (each gradient held for its bucket, a full
  // bucket filled and handed to the communicator) and in end() (the rest
  // issued, the device ordered after the exchange, the grads set): the
  // host's share of a data-parallel step (docs/benchmarks.md, issue 37).
  double hook_seconds = 0.0;
  double end_seconds = 0.0;
};

using NamedLeaves = std::vector<std::pair<std::string, Variable>>;

class GradientSync {
 public:
  GradientSync(Communicator& comm, GradSyncOptions options = {});
  ~GradientSync();  // removes hooks still registered
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Registers the hooks for one backward pass over `leaves` (leaves that
  // require grad). Throws if a previous begin() was not ended.
  void begin(const NamedLeaves& leaves);
  // Sets each leaf's grad to the average, and orders the device's next work
  // after every exchange (Work::wait_on_device: on a GPU the host does not
  // wait, and a collective that fails or hangs surfaces at the next wait(),
  // e.g. the trainer's read of the step's loss, or at its deadline). Throws
  // coppice::Error when a collective is already known to have failed (the
  // hooks are removed first).
  void end();

  const GradSyncOptions& options() const { return options_; }
  const GradSyncStats& last_stats() const { return stats_; }
  // Error-feedback residuals by leaf name (top-k only), e.g. for checkpoints.
  const std::map<std::string, Tensor>& residuals() const { return residuals_; }

 private:
  struct Impl;
  Communicator& comm_;
  GradSyncOptions options_;
  GradSyncStats stats_;
  std::map<std::string, Tensor> residuals_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace coppice
