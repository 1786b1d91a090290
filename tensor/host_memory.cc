#include "tensor/host_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "tensor/checked_math.h"
#include "tensor/error.h"

namespace coppice {
namespace {

// The first `max` bytes of a small kernel file (procfs, cgroupfs), or
// nullopt. Plain read(2): no stream set-up on the allocation path.
std::optional<std::string> read_small(const std::string& path, size_t max = 8192) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out(max, '\0');
  size_t done = 0;
  while (done < max) {
    const ssize_t n = ::read(fd, &out[done], max - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

// A decimal number at the start of `s` (after blanks); nullopt if none or
// too large for int64.
std::optional<int64_t> leading_number(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  if (i == s.size() || s[i] < '0' || s[i] > '9') return std::nullopt;
  int64_t v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (mul_overflows(v, 10, &v) || add_overflows(v, s[i] - '0', &v)) return std::nullopt;
  }
  return v;
}

// The value of `key` in "key: value [kB]" or "key value" lines, in bytes
// when the line says kB.
std::optional<int64_t> field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0) continue;
    std::string_view rest = line.substr(key.size());
    if (rest[0] == ':')
      rest.remove_prefix(1);
    else if (rest[0] != ' ')
      continue;  // a longer key with this prefix
    std::optional<int64_t> v = leading_number(rest);
    if (!v) return std::nullopt;
    if (rest.find("kB") != std::string_view::npos && mul_overflows(*v, 1024, &*v)) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

// A cgroup with a memory limit: its directory and the limit.
struct LimitedCgroup {
  std::string dir;
  int64_t limit = 0;
};

// What changes only by a person's hand, read once per process: the
// overcommit mode, and this process's cgroup and those above it that have a
// memory limit (each read costs a system call; a request reads only what
// moves: /proc/meminfo and the limited cgroups' usage).
struct Setting {
  bool strict_overcommit = false;
  bool v2 = false;
  std::vector<LimitedCgroup> limited;
};

// This process's cgroup directories, its own first ("" when there is no
// memory cgroup file system).
std::vector<std::string> cgroup_dirs(bool* v2) {
  const std::optional<std::string> self = read_small("/proc/self/cgroup");
  if (!self) return {};
  std::string base, path;
  size_t pos = 0;
  while (pos < self->size()) {
    size_t eol = self->find('\n', pos);
    if (eol == std::string::npos) eol = self->size();
    const std::string line = self->substr(pos, eol - pos);
    pos = eol + 1;
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    bool memory = false;
    for (size_t s = 0; s <= controllers.size();) {
      size_t e = controllers.find(',', s);
      if (e == std::string::npos) e = controllers.size();
      memory = memory || controllers.compare(s, e - s, "memory") == 0;
      s = e + 1;
    }
    if (memory) {  // the v1 memory controller
      base = "/sys/fs/cgroup/memory";
      path = line.substr(b + 1);
      *v2 = false;
      break;
    }
    if (controllers.empty() && line.compare(0, a, "0") == 0 &&
        ::access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
      base = "/sys/fs/cgroup";  // the unified hierarchy; a v1 memory line later wins
      path = line.substr(b + 1);
      *v2 = true;
    }
  }
  if (base.empty()) return {};
  // Without a cgroup namespace the path is the host's; inside one it is "/"
  // and the mount is the process's own cgroup. A path missing under the
  // mount means the mount is already the process's cgroup.
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.empty() && ::access((base + path).c_str(), F_OK) != 0) path.clear();
  std::vector<std::string> dirs;
  for (;;) {
    dirs.push_back(base + path);
    if (path.empty()) break;
    path.erase(path.rfind('/'));
  }
  return dirs;
}

const Setting& setting() {
  static const Setting s = [] {
    Setting out;
    const std::optional<std::string> mode = read_small("/proc/sys/vm/overcommit_memory", 16);
    out.strict_overcommit = mode && !mode->empty() && (*mode)[0] == '2';
    for (const std::string& dir : cgroup_dirs(&out.v2)) {
      const std::optional<std::string> text = read_small(dir + (out.v2 ? "/memory.max" : "/memory.limit_in_bytes"), 64);
      const std::optional<int64_t> limit = text ? leading_number(*text) : std::nullopt;  // "max" (v2): no limit
      // v1 writes "no limit" as a page-rounded 2^63 - 1.
      if (limit && *limit < (int64_t{1} << 62)) out.limited.push_back({dir, *limit});
    }
    return out;
  }();
  return s;
}

// The room left under one cgroup's limit: the limit minus what is charged
// to it, plus the page cache charged to it, which the kernel reclaims before
// it refuses.
std::optional<int64_t> cgroup_room(const LimitedCgroup& c, bool v2) {
  const std::optional<std::string> usage_text =
      read_small(c.dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"), 64);
  const std::optional<int64_t> usage = usage_text ? leading_number(*usage_text) : std::nullopt;
  if (!usage) return std::nullopt;
  int64_t cache = 0;
  if (const std::optional<std::string> stat = read_small(c.dir + "/memory.stat", 16384)) {
    cache = field(*stat, v2 ? "file" : "total_cache").value_or(0);
  }
  return std::max<int64_t>(0, c.limit - *usage + std::min(cache, *usage));
}

constexpr int64_t kGiB = int64_t{1} << 30;

}  // namespace

std::optional<int64_t> meminfo_available(std::string_view meminfo, bool strict_overcommit) {
  std::optional<int64_t> available = field(meminfo, "MemAvailable");
  if (!available) return std::nullopt;
  const int64_t swap = field(meminfo, "SwapFree").value_or(0);
  int64_t total = 0;
  if (add_overflows(*available, swap, &total)) total = std::numeric_limits<int64_t>::max();
  if (strict_overcommit) {
    const std::optional<int64_t> limit = field(meminfo, "CommitLimit"), committed = field(meminfo, "Committed_AS");
    if (limit && committed) total = std::min(total, std::max<int64_t>(0, *limit - *committed));
  }
  return total;
}

std::optional<int64_t> host_memory_available() {
  const Setting& s = setting();
  const std::optional<std::string> meminfo = read_small("/proc/meminfo");
  if (!meminfo) return std::nullopt;
  std::optional<int64_t> available = meminfo_available(*meminfo, s.strict_overcommit);
  if (!available) return std::nullopt;
  for (const LimitedCgroup& c : s.limited) {
    if (const std::optional<int64_t> room = cgroup_room(c, s.v2)) available = std::min(*available, *room);
  }
  return available;
}

std::string format_bytes(int64_t bytes) {
  char unit[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= kGiB)
    std::snprintf(unit, sizeof unit, "%.3g GiB", b / static_cast<double>(kGiB));
  else if (bytes >= (1 << 20))
    std::snprintf(unit, sizeof unit, "%.3g MiB", b / static_cast<double>(1 << 20));
  else
    std::snprintf(unit, sizeof unit, "%.3g KiB", b / 1024.0);
  return str_cat(bytes, " bytes (", unit, ")");
}

void check_host_memory(int64_t bytes, std::string_view what) {
  const std::optional<int64_t> available = host_memory_available();
  if (!available || bytes <= *available) return;
  fail(what, ": needs ", format_bytes(bytes), " but only ", format_bytes(*available), " of host memory are available");
}

}  // namespace coppice
