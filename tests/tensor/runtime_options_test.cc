// tensor/runtime_options.h: the defaults, every variable's accepted
// spellings, strict parsing with errors that name the variable, the value and
// what is accepted, the setter's validation and the scoped override. The
// environment is a fake (runtime_options_from), so no test touches the
// process's.
#include "tensor/runtime_options.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using testing::throws_with;

// The options that `vars` (name -> value) give.
RuntimeOptions from(const std::map<std::string, std::string>& vars) {
  return runtime_options_from([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(RuntimeOptions, DefaultsWithNothingSet) {
  const RuntimeOptions o = from({});
  EXPECT_EQ(o.num_threads, 0);
  EXPECT_EQ(o.profile, ProfileMode::kOff);
  EXPECT_EQ(o.cpu_simd, CpuSimd::kAuto);
  // An empty variable is unset (a retired one too).
  EXPECT_EQ(from({{"COPPICE_PROFILE", ""}, {"COPPICE_NUM_THREADS", ""}, {"COPPICE_NM24_MMA", ""}}).num_threads, 0);
}

TEST(RuntimeOptions, ReadsEveryVariable) {
  const RuntimeOptions o =
      from({{"COPPICE_NUM_THREADS", "3"}, {"COPPICE_PROFILE", "shapes"}, {"COPPICE_CPU_SIMD", "sse"}});
  EXPECT_EQ(o.num_threads, 3);
  EXPECT_EQ(o.profile, ProfileMode::kShapes);
  EXPECT_EQ(o.cpu_simd, CpuSimd::kSse);
  EXPECT_EQ(from({{"COPPICE_PROFILE", "1"}}).profile, ProfileMode::kOn);
  EXPECT_EQ(from({{"COPPICE_PROFILE", "0"}}).profile, ProfileMode::kOff);
  EXPECT_EQ(from({{"COPPICE_NUM_THREADS", "1024"}}).num_threads, 1024);
}

// The variables that pinned routes before sparse/route_choices.h took them
// over: an error that says what to write instead, never a silent no-op.
TEST(RuntimeOptions, RetiredRouteVariablesSayWhatReplacesThem) {
  auto bad = [](const std::string& name, const std::string& value) { return [=] { from({{name, value}}); }; };
  EXPECT_TRUE(throws_with(bad("COPPICE_NM24_MMA", "off"), {"COPPICE_NM24_MMA='off'", "COPPICE_ROUTES=nm24="}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM", "rows"), {"COPPICE_CSR_SPMM='rows'", "COPPICE_ROUTES=csr_spmm="}));
  EXPECT_TRUE(throws_with(bad("COPPICE_BSR_TILES", "0"), {"COPPICE_BSR_TILES='0'", "COPPICE_ROUTES=bsr_tiles="}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM_LOG", "1"), {"COPPICE_CSR_SPMM_LOG='1'", "route_choices"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_ATTENTION_WGMMA", "0"),
                          {"COPPICE_ATTENTION_WGMMA='0'", "COPPICE_ROUTES=attention=mma_sync"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_SDDMM_DENSE_DENSITY", "2"),
                          {"COPPICE_SDDMM_DENSE_DENSITY='2'", "COPPICE_ROUTES=sddmm_dense="}));
}

TEST(RuntimeOptions, BadValuesNameTheVariableTheValueAndWhatIsAccepted) {
  auto bad = [](const std::string& name, const std::string& value) { return [=] { from({{name, value}}); }; };
  EXPECT_TRUE(throws_with(bad("COPPICE_CPU_SIMD", "auto "), {"COPPICE_CPU_SIMD='auto '"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_PROFILE", "yes"), {"COPPICE_PROFILE='yes'", "0, 1, shapes"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CPU_SIMD", "avx512"), {"COPPICE_CPU_SIMD='avx512'", "auto, sse"}));
  for (const char* v : {"8x", "0", "-2", "1025", "99999999999", " 4", "4.0", "+4"}) {
    EXPECT_TRUE(throws_with(bad("COPPICE_NUM_THREADS", v),
                            {str_cat("COPPICE_NUM_THREADS='", v, "'"), "an integer in [1, 1024]"}))
        << v;
  }
  // Bytes from outside stay one printable line.
  EXPECT_TRUE(throws_with(bad("COPPICE_CPU_SIMD", "auto\nsse"), {"'auto\\nsse'"}));
}

TEST(RuntimeOptions, SetterValidatesAndScopedOverrideRestores) {
  const RuntimeOptions before = runtime_options();
  RuntimeOptions o = before;
  o.num_threads = -1;
  EXPECT_TRUE(throws_with([&] { set_runtime_options(o); }, {"num_threads = -1"}));
  EXPECT_EQ(runtime_options().num_threads, before.num_threads);  // unchanged
  {
    ScopedRuntimeOptions scoped([](RuntimeOptions& r) { r.cpu_simd = CpuSimd::kSse; });
    EXPECT_EQ(runtime_options().cpu_simd, CpuSimd::kSse);
    {
      ScopedRuntimeOptions inner([](RuntimeOptions& r) { r.profile = ProfileMode::kShapes; });
      EXPECT_EQ(runtime_options().profile, ProfileMode::kShapes);
      EXPECT_EQ(runtime_options().cpu_simd, CpuSimd::kSse);  // the outer scope's
    }
    EXPECT_EQ(runtime_options().profile, before.profile);
  }
  EXPECT_EQ(runtime_options().cpu_simd, before.cpu_simd);
  // A scope whose change is out of range throws and changes nothing.
  EXPECT_TRUE(throws_with([] { ScopedRuntimeOptions s([](RuntimeOptions& r) { r.num_threads = 5000; }); },
                          {"num_threads = 5000"}));
  EXPECT_EQ(runtime_options().num_threads, before.num_threads);
}

TEST(RuntimeOptions, CodeCanTurnProfilingOn) {
  EXPECT_EQ(runtime_options().profile, ProfileMode::kOff);  // this binary runs without COPPICE_PROFILE
  ScopedRuntimeOptions on([](RuntimeOptions& r) { r.profile = ProfileMode::kShapes; });
  EXPECT_EQ(runtime_options().profile, ProfileMode::kShapes);
}

}  // namespace
}  // namespace coppice
