// How much host memory a new allocation can still have, so that a request
// larger than the machine can give is refused with a message (the CPU
// allocator, the model zoo and job validation) instead of being overcommitted
// and killed later, or wrapping around.
//
// "Available" is what the process can take without swapping others out or
// waking the OOM killer: /proc/meminfo's MemAvailable (free memory plus the
// page cache and slabs the kernel can reclaim) plus SwapFree; under strict
// overcommit (vm.overcommit_memory = 2) at most CommitLimit - Committed_AS;
// and at most the room left under the memory limit of the process's cgroup
// and of each cgroup above it (v2 memory.max - memory.current, v1
// memory.limit_in_bytes - memory.usage_in_bytes), which is what bounds a
// container whose /proc/meminfo shows the whole host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coppice {

// The bytes available now, or nullopt where /proc/meminfo cannot be read
// (not Linux). /proc/meminfo and the limited cgroups' usage are read afresh
// on each call (one file where no cgroup limit applies: about 20
// microseconds); the overcommit mode and which cgroups have limits, once per
// process.
std::optional<int64_t> host_memory_available();

// MemAvailable + SwapFree of a /proc/meminfo text, in bytes (nullopt without
// MemAvailable); limited to CommitLimit - Committed_AS when `strict_overcommit`.
std::optional<int64_t> meminfo_available(std::string_view meminfo, bool strict_overcommit);

// "17179869184 bytes (16 GiB)": a byte count as the messages show it.
std::string format_bytes(int64_t bytes);

// Throws coppice::Error "<what>: needs N bytes (..) but only M bytes (..) of
// host memory are available" when `bytes` is more than host_memory_available().
void check_host_memory(int64_t bytes, std::string_view what);

}  // namespace coppice
