#include "tools/bench/bench_util.h"

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/io/json.h"

namespace coppice::bench {
namespace {

TEST(BenchUtilTest, Median) {
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({1.0, 100.0, 2.0}), 2.0);  // robust to one outlier
}

// A fake clock: each call of the op takes `op_ms` of fake time.
struct FakeDevice {
  double now = 0;
  double op_ms;
  int calls = 0, syncs = 0;
  explicit FakeDevice(double ms) : op_ms(ms) {}
};

TEST(BenchUtilTest, TimeOpWarmsUpRepeatsAndSyncs) {
  FakeDevice d(2.0);
  TimingOptions o;
  o.warmup = 3;
  o.reps = 5;
  o.min_sample_ms = 1.0;
  Timing t = time_op([&] { d.now += d.op_ms, ++d.calls; }, [&] { ++d.syncs; }, o, [&] { return d.now; });
  EXPECT_EQ(t.inner, 1);  // one call already lasts longer than min_sample_ms
  EXPECT_EQ(t.samples_ms.size(), 5u);
  EXPECT_EQ(d.calls, 3 + 1 + 5);  // warm-up, calibration, samples
  EXPECT_EQ(d.syncs, 1 + 1 + 2 * 5);  // after warm-up, after calibration, around each sample
  EXPECT_DOUBLE_EQ(t.median_ms, 2.0);
  EXPECT_DOUBLE_EQ(t.min_ms, 2.0);
  EXPECT_DOUBLE_EQ(t.max_ms, 2.0);
}

TEST(BenchUtilTest, TimeOpBatchesShortOps) {
  FakeDevice d(0.03);
  TimingOptions o;
  o.warmup = 0;
  o.reps = 4;
  o.min_sample_ms = 1.0;
  Timing t = time_op([&] { d.now += d.op_ms, ++d.calls; }, [] {}, o, [&] { return d.now; });
  EXPECT_EQ(t.inner, 34);  // ceil(1.0 / 0.03)
  EXPECT_EQ(d.calls, 1 + 4 * 34);
  EXPECT_NEAR(t.median_ms, 0.03, 1e-12);  // reported per call

  // A zero-time op is capped at max_inner; no min_sample_ms means one call per sample.
  FakeDevice z(0.0);
  o.max_inner = 50;
  t = time_op([&] { ++z.calls; }, [] {}, o, [&] { return z.now; });
  EXPECT_EQ(t.inner, 50);
  o.min_sample_ms = 0;
  t = time_op([&] { ++z.calls; }, [] {}, o, [&] { return z.now; });
  EXPECT_EQ(t.inner, 1);
}

TEST(BenchUtilTest, TimeOpWithTheRealClock) {
  TimingOptions o;
  o.warmup = 1;
  o.reps = 3;
  volatile double sink = 0;
  Timing t = time_op([&] { for (int i = 0; i < 1000; ++i) sink = sink + i; }, [] {}, o);
  EXPECT_EQ(t.samples_ms.size(), 3u);
  EXPECT_GT(t.median_ms, 0);
  EXPECT_LE(t.min_ms, t.median_ms);
  EXPECT_LE(t.median_ms, t.max_ms);
}

TEST(BenchUtilTest, JsonScalars) {
  EXPECT_EQ(json_number(1.5), "1.5");
  EXPECT_EQ(json_number(51234.5), "51234.5");
  EXPECT_EQ(json_number(kNaN), "null");
  EXPECT_EQ(json_number(1.0 / 0.0), "null");
  EXPECT_EQ(json_string("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
}

// The project's JSON reader takes integers only: blank every number to 0
// (digits inside strings too, which keeps the structure) before parsing.
absl::StatusOr<json::Value> parse_report(const std::string& text) {
  static const std::regex number("-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?");
  return json::parse(std::regex_replace(text, number, "0"));
}

TEST(BenchUtilTest, ReportIsValidJsonWithTheSchema) {
  Report report;
  report.info = {{"tool", "coppice-bench"}, {"gpu_name", "NVIDIA \"H100\""}};
  report.numbers = {{"schema_version", 1}, {"cuda_device_count", 0}};
  Result gemm;
  gemm.suite = "gemm";
  gemm.op = "matmul";
  gemm.device = "cuda:0";
  gemm.dtype = "f32";
  gemm.shape = {4096, 4096, 4096};
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  gemm.median_ms = 2.5;
  gemm.min_ms = 2.4;
  gemm.max_ms = 2.7;
  gemm.peak = 67000;
  gemm.reps = 20;
  gemm.inner = 1;
  Result add;
  add.suite = "elementwise";
  add.op = "add";
  add.device = "cpu";
  add.dtype = "f32";
  add.shape = {16};
  add.bytes = 3 * 16 * 4;
  add.status = "skipped: no CUDA device";
  report.results = {gemm, add};

  absl::StatusOr<json::Value> v = parse_report(report_to_json(report));
  ASSERT_TRUE(v.ok()) << v.status() << "\n" << report_to_json(report);
  EXPECT_EQ(v->find("tool")->as_string(), "coppice-bench");
  EXPECT_EQ(v->find("gpu_name")->as_string(), "NVIDIA \"H0\"");
  EXPECT_TRUE(v->find("schema_version")->is_integer());
  const json::Value* results = v->find("results");
  ASSERT_NE(results, nullptr);
  ASSERT_EQ(results->items().size(), 2u);
  const json::Value& g = results->items()[0];
  for (const char* key : {"suite", "op", "device", "device_name", "dtype", "shape", "status", "median_ms", "min_ms",
                          "max_ms", "gflops", "peak_gflops", "fraction_of_peak", "peak_source", "reps", "inner"}) {
    EXPECT_NE(g.find(key), nullptr) << key;
  }
  EXPECT_EQ(g.find("shape")->items().size(), 3u);
  EXPECT_EQ(g.find("status")->as_string(), "ok");
  EXPECT_TRUE(g.find("median_ms")->is_integer());
  EXPECT_NE(result_to_json(gemm).find("\"reps\": 20, \"inner\": 1"), std::string::npos);
  // 2 * 4096^3 flops in 2.5 ms = 54975.6 GFLOP/s.
  EXPECT_NE(result_to_json(gemm).find("\"gflops\": 54975.6"), std::string::npos) << result_to_json(gemm);
  EXPECT_NE(result_to_json(gemm).find("\"fraction_of_peak\": 0.820531"), std::string::npos);
  const json::Value& a = results->items()[1];
  EXPECT_NE(a.find("gbps"), nullptr);
  EXPECT_EQ(a.find("gflops"), nullptr);
  EXPECT_TRUE(a.find("gbps")->is_null());
  EXPECT_TRUE(a.find("median_ms")->is_null());
  EXPECT_EQ(a.find("status")->as_string(), "skipped: no CUDA device");

  Report empty;
  EXPECT_TRUE(parse_report(report_to_json(empty)).ok()) << report_to_json(empty);
}

TEST(BenchUtilTest, ParsesTheCommandLine) {
  absl::StatusOr<Config> c = parse_args({});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->gemm && c->elementwise && c->cpu && c->cuda);
  EXPECT_EQ(c->size, 0);
  EXPECT_EQ(c->reps, 20);

  c = parse_args({"gemm", "--device", "cuda", "--size", "512", "--reps=7", "--json", "/tmp/x.json", "--dtype",
                  "bf16,F16"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->gemm);
  EXPECT_FALSE(c->elementwise);
  EXPECT_FALSE(c->cpu);
  EXPECT_TRUE(c->cuda);
  EXPECT_EQ(c->size, 512);
  EXPECT_EQ(c->numel, 0);
  EXPECT_EQ(c->reps, 7);
  EXPECT_EQ(c->json_path, "/tmp/x.json");
  EXPECT_EQ(c->dtypes, (std::vector<DType>{DType::kBF16, DType::kF16}));

  c = parse_args({"elementwise", "--size", "1000", "--device=cpu", "--warmup", "0", "--min-sample-ms", "0.5"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->gemm);
  EXPECT_EQ(c->numel, 1000);  // --size is the element count for the elementwise suite alone
  EXPECT_FALSE(c->cuda);
  EXPECT_EQ(c->warmup, 0);
  EXPECT_EQ(c->min_sample_ms, 0.5);

  EXPECT_TRUE(parse_args({"--help"})->help);

  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"conv"},
                                             {"gemm", "all"},
                                             {"--device", "tpu"},
                                             {"--size"},
                                             {"--size", "0"},
                                             {"--size", "12x"},
                                             {"--reps", "-1"},
                                             {"--dtype", "i32"},
                                             {"--dtype", ""},
                                             {"--json="},
                                             {"--min-sample-ms", "-1"},
                                             {"--bogus", "1"}}) {
    absl::StatusOr<Config> r = parse_args(bad);
    EXPECT_FALSE(r.ok()) << bad[0];
  }
  EXPECT_NE(parse_args({"--bogus"}).status().message().find("unknown flag '--bogus'"), absl::string_view::npos);
}

TEST(BenchUtilTest, ReferencePeaks) {
  Peak p = reference_peak("NVIDIA H100 80GB HBM3", DType::kF32, "gflops");
  EXPECT_EQ(p.value, 67e3);
  EXPECT_NE(p.source.find("H100 SXM5"), std::string::npos);
  EXPECT_EQ(reference_peak("NVIDIA H100 80GB HBM3", DType::kBF16, "gflops").value, 989e3);
  EXPECT_EQ(reference_peak("NVIDIA H100 80GB HBM3", DType::kF32, "gbps").value, 3350);
  EXPECT_EQ(reference_peak("NVIDIA H100 PCIe", DType::kF16, "gflops").value, 756e3);
  EXPECT_EQ(reference_peak("NVIDIA H200", DType::kF32, "gbps").value, 4800);
  EXPECT_TRUE(std::isnan(reference_peak("", DType::kF32, "gflops").value));
  EXPECT_TRUE(std::isnan(reference_peak("NVIDIA A100-SXM4-80GB", DType::kF32, "gflops").value));
  EXPECT_TRUE(std::isnan(reference_peak("NVIDIA H100 80GB HBM3", DType::kI32, "gflops").value));
}

}  // namespace
}  // namespace coppice::bench
