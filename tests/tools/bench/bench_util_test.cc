#include "tools/bench/bench_util.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sparse/route_choices.h"
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
  EXPECT_EQ(d.calls, 3 + 1 + 5);      // warm-up, calibration, samples
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
  Timing t = time_op(
      [&] {
        for (int i = 0; i < 1000; ++i) sink = sink + i;
      },
      [] {}, o);
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

  c = parse_args(
      {"gemm", "--device", "cuda", "--size", "512", "--reps=7", "--json", "/tmp/x.json", "--dtype", "bf16,F16"});
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

  c = parse_args({"spmm", "--size", "1024", "--reps", "3"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->spmm);
  EXPECT_FALSE(c->gemm || c->elementwise || c->sddmm);
  EXPECT_EQ(c->size, 1024);
  EXPECT_EQ(c->numel, 0);  // --size is not an element count here
  EXPECT_TRUE(c->reps_given);
  EXPECT_FALSE(c->warmup_given);
  c = parse_args({"sddmm"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sddmm && !c->spmm && !c->gemm && !c->elementwise);
  EXPECT_FALSE(c->reps_given);
  c = parse_args({"all"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->gemm && c->elementwise && c->spmm && c->sddmm);

  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{{"conv"},
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

// --routes-out writes the planners' choices, --routes-in takes them back
// instead of measuring (a profiled run then takes a plain run's routes); a
// missing or malformed file is an error naming it, and restores nothing.
TEST(BenchUtilTest, RouteChoicesGoThroughAFile) {
  const absl::StatusOr<Config> c = parse_args({"train", "--routes-in", "a.json", "--routes-out=b.json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->routes_in, "a.json");
  EXPECT_EQ(c->routes_out, "b.json");
  EXPECT_FALSE(parse_args({"--routes-in="}).ok());
  EXPECT_FALSE(parse_args({"--routes-out"}).ok());

  const std::string dir = ::testing::TempDir(), path = dir + "/routes.json", bad = dir + "/bad_routes.json";
  clear_route_choices();
  const std::vector<std::string_view> candidates = {"sparse", "dense"};
  EXPECT_EQ(choose_route("nm24", "key", candidates, [] { return std::vector<double>{2.0, 1.0}; }), 1u);
  ASSERT_TRUE(write_routes(path).ok());
  clear_route_choices();
  ASSERT_TRUE(restore_routes(path).ok());
  bool measured = true;
  EXPECT_EQ(choose_route(
                "nm24", "key", candidates,
                [] {
                  return std::vector<double>{1.0, 2.0};
                },
                &measured),
            1u);  // the file's winner, not a new measurement
  EXPECT_FALSE(measured);

  clear_route_choices();
  const absl::Status missing = restore_routes(dir + "/no_such_routes.json");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no_such_routes.json"), absl::string_view::npos) << missing.message();
  {
    std::ofstream f(bad);
    f << "[{\"decision\":\"nm24\"";
  }
  const absl::Status malformed = restore_routes(bad);
  EXPECT_FALSE(malformed.ok());
  EXPECT_NE(malformed.message().find("bad_routes.json"), absl::string_view::npos) << malformed.message();
  EXPECT_TRUE(recorded_route_choices().empty());
  EXPECT_FALSE(write_routes(dir + "/no_such_dir/routes.json").ok());
}

// bench train's update, BSR block and GELU: the GPT jobs' AdamW by name,
// blocks a power of two, erf or tanh; anything else named in the error.
TEST(BenchUtilTest, TrainOptimizerAndBlock) {
  absl::StatusOr<Config> c = parse_args({"train"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer, "sgd");
  EXPECT_EQ(c->train_block, 32);
  EXPECT_FALSE(c->block_given);  // bench bsr: every block size
  EXPECT_EQ(c->train_gelu, "erf");
  c = parse_args({"train", "--optimizer", "adamw", "--block=64", "--gelu", "tanh"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->optimizer, "adamw");
  EXPECT_EQ(c->train_block, 64);
  EXPECT_TRUE(c->block_given);
  EXPECT_EQ(c->train_gelu, "tanh");
  // bench bsr's weight: [--hidden, --in], square by default.
  c = parse_args({"bsr", "--hidden", "1024"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(linear_weight_shape(*c), (std::pair<int64_t, int64_t>{1024, 1024}));
  c = parse_args({"bsr", "--hidden", "1024", "--in=4096"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(linear_weight_shape(*c), (std::pair<int64_t, int64_t>{1024, 4096}));
  EXPECT_EQ(linear_weight_shape(Config{}), (std::pair<int64_t, int64_t>{kSparseSize, kSparseSize}));
  for (const auto& [bad, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"train", "--optimizer", "adam"}, "--optimizer: 'sgd' or 'adamw', got 'adam'"},
           {{"train", "--gelu", "none"}, "--gelu: 'erf' or 'tanh', got 'none'"},
           {{"train", "--block", "48"}, "--block: a power of two up to 4096, got 48"},
           {{"train", "--block", "8192"}, "--block: a power of two up to 4096"},
           {{"train", "--block", "0"}, "--block"},
           {{"bsr", "--in", "0"}, "--in"}}) {
    absl::StatusOr<Config> r = parse_args(bad);
    ASSERT_FALSE(r.ok()) << bad[2];
    EXPECT_NE(r.status().message().find(says), absl::string_view::npos) << r.status().message();
  }
}

TEST(BenchUtilTest, PatternNnz) {
  EXPECT_EQ(pattern_nnz(100, 0.5), 50);
  EXPECT_EQ(pattern_nnz(4096 * 4096, 0.9), 1677722);  // round(16777216 * 0.1)
  EXPECT_EQ(pattern_nnz(1000, 0.99), 10);
  EXPECT_EQ(pattern_nnz(1000, 1.0), 0);
  EXPECT_EQ(pattern_nnz(1000, 0.0), 1000);
  EXPECT_EQ(pattern_nnz(0, 0.5), 0);
}

TEST(BenchUtilTest, RandomPatternHasExactNnzAndIsSeeded) {
  for (double s : {0.0, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0}) {
    std::vector<uint8_t> m = random_pattern(300, 784, s, 7);
    ASSERT_EQ(m.size(), 300u * 784u);
    int64_t nnz = 0;
    for (uint8_t v : m) nnz += v;
    EXPECT_EQ(nnz, pattern_nnz(300 * 784, s)) << s;
  }
  EXPECT_EQ(random_pattern(64, 64, 0.9, 1), random_pattern(64, 64, 0.9, 1));
  EXPECT_NE(random_pattern(64, 64, 0.9, 1), random_pattern(64, 64, 0.9, 2));
  // Uniform: each half of a large pattern holds about half the entries.
  std::vector<uint8_t> m = random_pattern(1024, 1024, 0.9, 3);
  int64_t first = 0, rest = 0;
  for (size_t i = 0; i < m.size(); ++i) (i < m.size() / 2 ? first : rest) += m[i];
  EXPECT_NEAR(static_cast<double>(first) / static_cast<double>(first + rest), 0.5, 0.01);
}

TEST(BenchUtilTest, RandomBlockPatternKeepsWholeBlocks) {
  std::vector<uint8_t> m = random_block_pattern(128, 64, 32, 16, 0.75, 5);
  ASSERT_EQ(m.size(), 128u * 64u);
  int64_t nnz = 0, blocks = 0;
  for (int64_t bi = 0; bi < 4; ++bi) {
    for (int64_t bj = 0; bj < 4; ++bj) {
      uint8_t first = m[static_cast<size_t>(bi * 32 * 64 + bj * 16)];
      blocks += first;
      for (int64_t i = 0; i < 32; ++i) {
        for (int64_t j = 0; j < 16; ++j) EXPECT_EQ(m[static_cast<size_t>((bi * 32 + i) * 64 + bj * 16 + j)], first);
      }
    }
  }
  for (uint8_t v : m) nnz += v;
  EXPECT_EQ(blocks, pattern_nnz(16, 0.75));  // 4 of 16 blocks
  EXPECT_EQ(nnz, blocks * 32 * 16);
  EXPECT_THROW(random_block_pattern(300, 784, 32, 32, 0.5, 1), std::exception);
}

TEST(BenchUtilTest, SparseFlops) {
  EXPECT_EQ(spmm_flops(1000, 256), 512000.0);
  EXPECT_EQ(sddmm_flops(1000, 4096), 8192000.0);
  EXPECT_EQ(dense_gemm_flops(300, 784, 256), 2.0 * 300 * 784 * 256);
}

TEST(BenchUtilTest, SparseResultFieldsInJson) {
  Result r;
  r.suite = "spmm";
  r.op = "matmul";
  r.device = "cpu";
  r.dtype = "f32";
  r.shape = {300, 784, 256};
  r.format = "csr";
  r.sparsity = 0.9;
  r.nnz = 23520;
  r.flops = spmm_flops(r.nnz, 256);
  r.median_ms = 1.0;
  std::string j = result_to_json(r);
  EXPECT_NE(j.find("\"format\": \"csr\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"sparsity\": 0.9"), std::string::npos) << j;
  EXPECT_NE(j.find("\"nnz\": 23520"), std::string::npos) << j;
  EXPECT_NE(j.find("\"gflops\": 12.0422"), std::string::npos) << j;
  // Dense suites keep the old fields only.
  Result g;
  g.suite = "gemm";
  std::string jg = result_to_json(g);
  EXPECT_EQ(jg.find("format"), std::string::npos) << jg;
  EXPECT_EQ(jg.find("sparsity"), std::string::npos) << jg;
  EXPECT_EQ(jg.find("nnz"), std::string::npos) << jg;
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
