// tensor/op_profile.h: the table of recorded calls (calls, total, mean,
// fastest), sorted by total; ProfileScope records nothing while profiling is
// off (this test binary runs without COPPICE_PROFILE).
#include "tensor/op_profile.h"

#include <string>

#include "gtest/gtest.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// The row of `key` in the report ("" if none).
std::string row_of(const std::string& report, const std::string& key) {
  const size_t at = report.find("  " + key + " ");
  if (at == std::string::npos) return "";
  return report.substr(at, report.find('\n', at) - at);
}

TEST(OpProfile, ReportsCallsTotalMeanAndFastestSortedByTotal) {
  op_profile_record("test_op_small", 0.001);
  op_profile_record("test_op_big", 0.010);
  op_profile_record("test_op_big", 0.030);
  const std::string report = op_profile_report();
  EXPECT_NE(report.find("op, calls, total ms, mean ms, min ms"), std::string::npos) << report;
  const std::string big = row_of(report, "test_op_big");
  ASSERT_FALSE(big.empty()) << report;
  EXPECT_NE(big.find(" 2 "), std::string::npos) << big;      // calls
  EXPECT_NE(big.find("40.000"), std::string::npos) << big;   // total ms
  EXPECT_NE(big.find("20.0000"), std::string::npos) << big;  // mean ms
  EXPECT_NE(big.find("10.0000"), std::string::npos) << big;  // fastest ms
  EXPECT_LT(report.find("test_op_big"), report.find("test_op_small")) << report;
}

TEST(OpProfile, OffByDefaultSoScopesAndDispatchRecordNothing) {
  ASSERT_FALSE(op_profile_enabled());
  { ProfileScope scope("test_scope_off", Device::cpu()); }
  (void)add(ones({4}), ones({4}));
  const std::string report = op_profile_report();
  EXPECT_TRUE(row_of(report, "test_scope_off").empty()) << report;
  EXPECT_EQ(report.find("add(dense, dense)"), std::string::npos) << report;
}

}  // namespace
}  // namespace coppice
