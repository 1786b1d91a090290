// tensor/runtime_options.h: the defaults, every variable's accepted
// spellings, strict parsing with errors that name the variable, the value and
// what is accepted, the setter's validation and the scoped override. The
// environment is a fake (runtime_options_from), so no test touches the
// process's.
#include "tensor/runtime_options.h"

#include <cmath>
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
  EXPECT_EQ(o.csr_spmm, CsrSpmmMode::kAuto);
  EXPECT_FALSE(o.csr_spmm_log);
  EXPECT_TRUE(o.bsr_tiles);
  EXPECT_EQ(o.nm24_mma, Nm24Mode::kAuto);
  EXPECT_TRUE(o.attention_wgmma);
  EXPECT_EQ(o.sddmm_dense_min_density, 0.005);
  // An empty variable is unset.
  EXPECT_EQ(from({{"COPPICE_CSR_SPMM", ""}, {"COPPICE_NUM_THREADS", ""}}).csr_spmm, CsrSpmmMode::kAuto);
}

TEST(RuntimeOptions, ReadsEveryVariable) {
  const RuntimeOptions o = from({{"COPPICE_NUM_THREADS", "3"},
                                 {"COPPICE_PROFILE", "shapes"},
                                 {"COPPICE_CPU_SIMD", "sse"},
                                 {"COPPICE_CSR_SPMM", "tiled"},
                                 {"COPPICE_CSR_SPMM_LOG", "1"},
                                 {"COPPICE_BSR_TILES", "0"},
                                 {"COPPICE_NM24_MMA", "off"},
                                 {"COPPICE_ATTENTION_WGMMA", "0"},
                                 {"COPPICE_SDDMM_DENSE_DENSITY", "0.25"}});
  EXPECT_EQ(o.num_threads, 3);
  EXPECT_EQ(o.profile, ProfileMode::kShapes);
  EXPECT_EQ(o.cpu_simd, CpuSimd::kSse);
  EXPECT_EQ(o.csr_spmm, CsrSpmmMode::kTiled);
  EXPECT_TRUE(o.csr_spmm_log);
  EXPECT_FALSE(o.bsr_tiles);
  EXPECT_EQ(o.nm24_mma, Nm24Mode::kOff);
  EXPECT_FALSE(o.attention_wgmma);
  EXPECT_EQ(o.sddmm_dense_min_density, 0.25);
  EXPECT_EQ(from({{"COPPICE_PROFILE", "1"}}).profile, ProfileMode::kOn);
  EXPECT_EQ(from({{"COPPICE_PROFILE", "0"}}).profile, ProfileMode::kOff);
  EXPECT_EQ(from({{"COPPICE_SDDMM_DENSE_DENSITY", "2"}}).sddmm_dense_min_density, 2.0);
  EXPECT_EQ(from({{"COPPICE_SDDMM_DENSE_DENSITY", "0"}}).sddmm_dense_min_density, 0.0);
  EXPECT_EQ(from({{"COPPICE_NUM_THREADS", "1024"}}).num_threads, 1024);
  for (CsrSpmmMode m :
       {CsrSpmmMode::kAuto, CsrSpmmMode::kOwn, CsrSpmmMode::kTiled, CsrSpmmMode::kRows, CsrSpmmMode::kCusparse}) {
    EXPECT_EQ(from({{"COPPICE_CSR_SPMM", std::string(csr_spmm_mode_name(m))}}).csr_spmm, m);
  }
  for (Nm24Mode m : {Nm24Mode::kAuto, Nm24Mode::kOn, Nm24Mode::kOff}) {
    EXPECT_EQ(from({{"COPPICE_NM24_MMA", std::string(nm24_mode_name(m))}}).nm24_mma, m);
  }
}

TEST(RuntimeOptions, BadValuesNameTheVariableTheValueAndWhatIsAccepted) {
  auto bad = [](const std::string& name, const std::string& value) { return [=] { from({{name, value}}); }; };
  EXPECT_TRUE(throws_with(bad("COPPICE_NM24_MMA", "1"), {"COPPICE_NM24_MMA='1'", "auto, on, off"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM", "fastest"),
                          {"COPPICE_CSR_SPMM='fastest'", "auto, own, tiled, rows, cusparse"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM", "auto "), {"COPPICE_CSR_SPMM='auto '"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_PROFILE", "yes"), {"COPPICE_PROFILE='yes'", "0, 1, shapes"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CPU_SIMD", "avx512"), {"COPPICE_CPU_SIMD='avx512'", "auto, sse"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_BSR_TILES", "off"), {"COPPICE_BSR_TILES='off'", "0, 1"}));
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM_LOG", "true"), {"COPPICE_CSR_SPMM_LOG='true'", "0, 1"}));
  for (const char* v : {"8x", "0", "-2", "1025", "99999999999", " 4", "4.0", "+4"}) {
    EXPECT_TRUE(throws_with(bad("COPPICE_NUM_THREADS", v),
                            {str_cat("COPPICE_NUM_THREADS='", v, "'"), "an integer in [1, 1024]"}))
        << v;
  }
  for (const char* v : {"0.5x", "nan", "NaN", "inf", "-0.1", "1e999", "", "0.5 ", "abc"}) {
    if (std::string(v).empty()) continue;  // unset
    EXPECT_TRUE(throws_with(bad("COPPICE_SDDMM_DENSE_DENSITY", v),
                            {str_cat("COPPICE_SDDMM_DENSE_DENSITY='", v, "'"), "a finite number >= 0"}))
        << v;
  }
  // Bytes from outside stay one printable line.
  EXPECT_TRUE(throws_with(bad("COPPICE_CSR_SPMM", "own\nrows"), {"'own\\nrows'"}));
}

TEST(RuntimeOptions, SetterValidatesAndScopedOverrideRestores) {
  const RuntimeOptions before = runtime_options();
  RuntimeOptions o = before;
  o.num_threads = -1;
  EXPECT_TRUE(throws_with([&] { set_runtime_options(o); }, {"num_threads = -1"}));
  o = before;
  o.sddmm_dense_min_density = std::nan("");
  EXPECT_TRUE(throws_with([&] { set_runtime_options(o); }, {"sddmm_dense_min_density"}));
  EXPECT_EQ(runtime_options().sddmm_dense_min_density, before.sddmm_dense_min_density);  // unchanged
  {
    ScopedRuntimeOptions scoped([](RuntimeOptions& r) {
      r.csr_spmm = CsrSpmmMode::kRows;
      r.bsr_tiles = false;
    });
    EXPECT_EQ(runtime_options().csr_spmm, CsrSpmmMode::kRows);
    EXPECT_FALSE(runtime_options().bsr_tiles);
    {
      ScopedRuntimeOptions inner([](RuntimeOptions& r) { r.sddmm_dense_min_density = 2.0; });
      EXPECT_EQ(runtime_options().sddmm_dense_min_density, 2.0);
      EXPECT_EQ(runtime_options().csr_spmm, CsrSpmmMode::kRows);  // the outer scope's
    }
    EXPECT_EQ(runtime_options().sddmm_dense_min_density, before.sddmm_dense_min_density);
  }
  EXPECT_EQ(runtime_options().csr_spmm, before.csr_spmm);
  EXPECT_EQ(runtime_options().bsr_tiles, before.bsr_tiles);
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
