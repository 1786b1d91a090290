// Tests for tensor/host_memory.h: /proc/meminfo read as MemAvailable +
// SwapFree (bounded by the commit limit under strict overcommit), and a
// request larger than the machine refused with both byte counts.
#include "tensor/host_memory.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

constexpr const char* kMeminfo =
    "MemTotal:       24684096 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   22283344 kB\n"
    "SwapTotal:       2000000 kB\n"
    "SwapFree:        1000000 kB\n"
    "CommitLimit:    12342048 kB\n"
    "Committed_AS:    2160812 kB\n";

TEST(HostMemory, ParsesMeminfo) {
  EXPECT_EQ(meminfo_available(kMeminfo, false), (22283344 + 1000000) * int64_t{1024});
  EXPECT_EQ(meminfo_available(kMeminfo, true), (12342048 - 2160812) * int64_t{1024});
  EXPECT_EQ(meminfo_available("MemTotal: 100 kB\n", false), std::nullopt);
  EXPECT_EQ(meminfo_available("MemAvailable: 8 kB\n", false), 8192);  // no swap line: no swap
  // A key that only starts like another does not count for it.
  EXPECT_EQ(meminfo_available("MemAvailableX: 1 kB\nMemAvailable: 2 kB\n", false), 2048);
  EXPECT_EQ(meminfo_available("MemAvailable: 99999999999999999999 kB\n", false), std::nullopt);
}

TEST(HostMemory, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 bytes (0.5 KiB)");
  EXPECT_EQ(format_bytes(int64_t{3} << 20), "3145728 bytes (3 MiB)");
  EXPECT_EQ(format_bytes(int64_t{34359738368}), "34359738368 bytes (32 GiB)");
}

TEST(HostMemory, RefusesMoreThanTheMachineHas) {
  const std::optional<int64_t> available = host_memory_available();
  ASSERT_TRUE(available.has_value()) << "this test runs on Linux";
  EXPECT_GT(*available, 0);
  check_host_memory(1 << 20, "a megabyte");  // no throw
  EXPECT_TRUE(testing::throws_with(
      [] { check_host_memory(int64_t{1} << 60, "the model"); },
      {"the model: needs 1152921504606846976 bytes (1.07e+09 GiB) but only ", " of host memory are available"}));
}

}  // namespace
}  // namespace coppice
