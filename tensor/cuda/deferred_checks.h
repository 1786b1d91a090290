// Checks whose answer a kernel leaves on the device (an index kernel's
// bad-index slot, index_check.cuh), read without making the host wait for
// the device. Reading the answer at the call synchronized the host with the
// GPU in the middle of every step (an embedding's forward and backward, the
// cross entropy's targets), and the GPU then idled while the host caught up.
//
// Instead, the answer's 8 bytes are copied into pinned host memory behind the
// kernel, on the device's stream, and the host looks at them once that copy
// has run, at the first of:
//   - a point where the host waits for the device anyway: synchronize(), or
//     a copy to or from host memory (backend.cc), which settles every check
//     of the device;
//   - a later check on the same device, which only recycles the checks
//     already done that passed, and leaves a failure queued.
// A failed check throws at the first of those points the coppice::Error the
// call would have thrown (naming the op, the index and its position), so an
// out-of-range index surfaces at the next read of any result instead of at
// the call that took it. Not at a later check: that call's own error
// context would wrap the earlier call's message, and blame the later call. Meanwhile the kernels never dereference it:
// their outputs hold zeros (index_select), are left unwritten there (gather) or miscount it (the sums), and the error
// is raised before anything reads them back. A check still queued when the process exits is never read: a program that
// neither reads a result nor synchronizes after a bad index does not hear of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace coppice::cuda {

// Queues the copy of *answer (device memory of `device`, written by work
// already queued on its current stream) to the host; once it has arrived,
// an answer of `passed` means the check passed, and any other value is
// given to resolve(value) at the next settle_checks, which throws to report
// the failure. First recycles the checks already done that passed (it never
// throws a failure). Not while capturing a graph: a capture defers its
// checks to after each replay (graph_capture.h's after_each_replay), whose
// replays call this.
void defer_check(int device, const int64_t* answer, int64_t passed, std::function<void(int64_t)> resolve);

// Resolves `device`'s deferred checks whose copies have run, in the order they
// were queued; with `wait`, waits for every queued copy first (free after a
// stream synchronization). Throws the first failure; the other checks are
// resolved and dropped either way (a failure is reported once).
void settle_checks(int device, bool wait);

// The checks of `device` queued and not yet resolved.
size_t pending_checks(int device);

}  // namespace coppice::cuda
