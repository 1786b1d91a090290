// What the bench suites share: the command line, timing (warm-up, repeats,
// median, with the device synchronized around each sample), results and their
// JSON form, and reference peaks.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace coppice::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- command line ----------------------------------------------------------
struct Config {
  bool gemm = true;
  bool elementwise = true;
  bool spmm = true;       // sparse x dense (tools/bench/spmm_bench.cc)
  bool sddmm = true;      // dense x dense sampled at a sparse pattern (sddmm_bench.cc)
  bool sparsify = true;   // sparsifiers on 16M elements (sparsify_bench.cc)
  bool dp = false;        // data-parallel training steps (dp_bench.cc); never part of "all"
  bool train = false;     // training steps per model, format and mode (train_bench.cc); never part of "all"
  bool bsr = false;       // a BSR linear layer's products and gelu forms (bsr_bench.cc); CUDA only, never part of "all"
  bool bsr_nm24 = false;  // BSR-of-2:4 beside BSR and 2:4 (bsr_nm24_bench.cc); CUDA only, never part of "all"
  bool rigl = false;      // a block-RigL update step beside an ordinary step (rigl_bench.cc); never part of "all"
  bool attention = false;  // fused attention forward and backward (attention_bench.cc); CUDA only, never part of "all"
  bool cpu = true;
  bool cuda = true;
  int64_t size = 0;   // GEMM m = n = k; 0: the per-device default
  int64_t numel = 0;  // elementwise element count; 0: the default
  int reps = 20;      // timed samples (the median is reported)
  int warmup = 3;
  bool reps_given = false;     // --reps / --warmup given: the sparse suites' CPU defaults
  bool warmup_given = false;   // (kCpuSparseReps, kCpuSparseWarmup) yield to them
  double min_sample_ms = 1.0;  // a sample repeats the op until it lasts this long (launch overhead)
  std::vector<DType> dtypes;   // empty: each suite's defaults
  std::string json_path;       // also write the JSON here
  std::string routes_in;       // --routes-in: the planners' route choices restored from here before the suites
  std::string routes_out;      // --routes-out: the route choices the run made, written here after it
  bool help = false;
  // The dp suite (tools/bench/dp_bench.cc); 0 / empty: its defaults.
  int64_t batch = 0;                  // per-rank batch (1024 on CUDA, kDpCpuBatch on the CPU)
  int64_t hidden = 0;                 // the MLP's width (4096 on CUDA, kDpCpuHidden on the CPU)
  int steps = 0;                      // timed steps (kDpSteps); warm-up steps: --warmup if given, else kDpWarmup
  double sparsity = 0.9;              // of the CSR weights (dp), of the BSR weights (rigl)
  bool sparsity_given = false;        // train: --sparsity given (its csr and bsr rows at that sparsity alone)
  std::vector<std::string> variants;  // dense, compact, densified (all three by default)
  int ranks = 1;                      // ranks as threads of this process on the CPU (inproc communicator)
  double timeout_s = 120.0;           // NCCL timeout of each collective
  bool allow_tf32 = false;            // --tf32: f32 dense matmuls on CUDA may use TF32 (tensor/precision.h)
  // The train suite (tools/bench/train_bench.cc); --batch, --hidden, --steps
  // and --warmup as for dp (its MLP). Empty lists: all.
  std::vector<std::string> train_models;   // mlp, lenet300, vit
  std::vector<std::string> train_formats;  // dense, csr, bsr, nm
  std::vector<std::string> train_modes;    // f32, tf32, bf16
  std::string config_dir = "configs";      // where the jobs' YAML files are
  bool cuda_graph = false;                 // --cuda-graph: train steps replayed from a CUDA graph (train/graph_step.h)
  // --step-read loss|check|paired: each train step also reads its loss to the
  // host as the trainer does ("loss"), or reads it with the trainer's
  // non-finite flags, the check folded into the optimizer step ("check";
  // issue 30's cost), or the two alternating in one process ("paired").
  std::string step_read;
  // --optimizer sgd|adamw: the step's update. sgd (the default): SGD with
  // momentum, as torch_train.py; adamw: the GPT jobs' update (configs/gpt_*.yaml:
  // AdamW, lr 6e-4, weight decay 0.1, gradients clipped to norm 1.0), so
  // that the trainer's step can be held to the benchmark's ("+adamw" rows).
  std::string optimizer = "sgd";
  // --block N: train's BSR block (a power of two; the largest power of two up
  // to N dividing each weight is used, as torch_train.py's --block).
  int64_t train_block = 32;
  bool block_given = false;  // bsr: --block given (its rows at that block alone)
  // --gelu erf|tanh: the GELU of train's transformer models (vit, gpt), set
  // as their job's model.options.gelu: erf (the exact GELU, the default) or
  // tanh (GPT-2's approximation), as torch_train.py's --gelu; tanh rows are
  // named "<model>+gelu_tanh".
  std::string train_gelu = "erf";
  // --propagate on|off: train's models with the output rules that sparsity
  // propagation infers from a traced step (models/propagation) attached, as
  // a job with sparsity.propagate runs them; on: rows "<model>+propagate".
  bool train_propagate = false;
  // --in I: the bsr suite's weight is [H, I] (--hidden H), for the
  // rectangular layers of a transformer (an MLP's [4H, H] and [H, 4H]); 0:
  // square.
  int64_t in_features = 0;
};

inline constexpr int64_t kCpuGemmSize = 1024;
inline constexpr int64_t kCudaGemmSize = 4096;
inline constexpr int64_t kElementwiseNumel = int64_t{1} << 24;  // 16M
// Sparse suites: W [4096, 4096] x X [4096, 4096] on CUDA; on the CPU (2 cores
// in CI) X has kCpuSparseBatch columns unless --size N is given (then every
// dimension of the big shape is N, on both devices).
inline constexpr int64_t kSparseSize = 4096;
inline constexpr int64_t kCpuSparseBatch = 256;
inline constexpr int kCpuSparseReps = 3;
inline constexpr int kCpuSparseWarmup = 1;

// The bsr suite's weight shape {out, in}: --hidden (kSparseSize) by --in (out).
inline std::pair<int64_t, int64_t> linear_weight_shape(const Config& c) {
  const int64_t out = c.hidden > 0 ? c.hidden : kSparseSize;
  return {out, c.in_features > 0 ? c.in_features : out};
}
// dp suite defaults: MLP hidden-hidden-hidden-hidden-10, per-rank batch.
inline constexpr int64_t kDpHidden = 4096;
inline constexpr int64_t kDpBatch = 1024;
inline constexpr int64_t kDpCpuHidden = 256;
inline constexpr int64_t kDpCpuBatch = 64;
inline constexpr int kDpSteps = 20;
inline constexpr int kDpWarmup = 5;
// train suite defaults: the MLP-4096 at batch 4096 on CUDA, 256 at 64 on the
// CPU; few steps so that a whole GPU run (3 models x 8 variants x 3 modes)
// stays within a few minutes.
inline constexpr int64_t kTrainHidden = 4096;
inline constexpr int64_t kTrainBatch = 4096;
inline constexpr int64_t kTrainCpuHidden = 256;
inline constexpr int64_t kTrainCpuBatch = 64;
inline constexpr int kTrainSteps = 10;
inline constexpr int kTrainWarmup = 3;
inline constexpr int kTrainCpuSteps = 3;
inline constexpr int kTrainCpuWarmup = 1;

std::string usage();
// Parses the arguments after the program name.
absl::StatusOr<Config> parse_args(const std::vector<std::string>& args);

// The planners' route choices (sparse/route_choices.h) restored from the
// file at `path` (as write_routes wrote it), and written there: a run under a
// profiler then takes the routes a plain run measured, where its own timings
// would come out otherwise (Nsight Compute serializes and slows every kernel).
// Errors name the file and what is wrong; nothing is restored then.
absl::Status restore_routes(const std::string& path);
absl::Status write_routes(const std::string& path);

// ---- timing ----------------------------------------------------------------
struct TimingOptions {
  int warmup = 3;
  int reps = 20;
  double min_sample_ms = 1.0;
  int max_inner = 1000;
};

struct Timing {
  std::vector<double> samples_ms;  // per call, one per rep
  int inner = 1;                   // calls per sample
  double median_ms = kNaN;
  double min_ms = kNaN;
  double max_ms = kNaN;
};

double median(std::vector<double> values);  // NaN when empty

// Runs `fn` `warmup` times, then `reps` samples of `inner` calls each, calling
// `sync` (wait for the device) before reading the clock at both ends of a
// sample. `inner` is picked from one calibration call so that a sample lasts
// at least min_sample_ms. `clock` returns milliseconds (steady by default; a
// test may pass a fake one).
Timing time_op(const std::function<void()>& fn, const std::function<void()>& sync, const TimingOptions& options,
               const std::function<double()>& clock = {});

// ---- results ---------------------------------------------------------------
struct Result {
  std::string suite;           // "gemm", "elementwise"
  std::string op;              // "matmul", "add"
  std::string device;          // "cpu", "cuda:0"
  std::string device_name;     // GPU model or CPU description; "" when unknown
  std::string dtype;           // "f32", ...
  std::vector<int64_t> shape;  // gemm: [m, n, k]; elementwise: [numel]; spmm, sddmm: [m, k, n]
  std::string format;          // sparse suites: "csr", "coo", "bsr", "dense" (baseline); "" elsewhere
  double sparsity = kNaN;      // sparse suites: fraction of zeros of the pattern; NaN (omitted) elsewhere
  int64_t nnz = -1;            // sparse suites: stored entries; -1 (omitted) elsewhere
  std::string status = "ok";   // "ok", "skipped: ...", "error: ..."
  int reps = 0;
  int inner = 0;
  double median_ms = kNaN;
  double min_ms = kNaN;
  double max_ms = kNaN;
  double flops = kNaN;  // per call (gemm)
  double bytes = kNaN;  // moved per call, read + write (elementwise)
  double peak = kNaN;   // GFLOP/s or GB/s, same unit as the throughput
  std::string peak_source;
  // Further numeric fields, written after the standard ones in this order
  // (the dp suite: world_size, samples_per_s, exchange bytes, ...).
  std::vector<std::pair<std::string, double>> extra;

  // GFLOP/s for gemm, GB/s for elementwise (NaN when not measured).
  double gflops() const;
  double gbps() const;
};

// Copies t's median, min, max, reps and inner into r.
void fill_timing(const Timing& t, Result* r);

struct Report {
  std::vector<Result> results;
  std::vector<std::pair<std::string, std::string>> info;  // top-level string fields
  std::vector<std::pair<std::string, double>> numbers;    // top-level numeric fields
};

// JSON helpers: numbers print with up to 6 significant digits; NaN and inf as null.
std::string json_number(double v);
std::string json_string(const std::string& s);
std::string result_to_json(const Result& r);
// One object: info and numbers first, then "results": [one result per line].
std::string report_to_json(const Report& report);

// ---- sparse patterns and work ---------------------------------------------
// Entries kept of `numel` at `sparsity` (fraction of zeros): round(numel * (1 - sparsity)).
int64_t pattern_nnz(int64_t numel, double sparsity);
// A uniformly random row-major [rows, cols] mask (1 = stored) with exactly
// pattern_nnz(rows * cols, sparsity) ones, the same for the same seed
// (selection sampling, Knuth's algorithm S, on a 64-bit Mersenne twister).
std::vector<uint8_t> random_pattern(int64_t rows, int64_t cols, double sparsity, uint64_t seed);
// The same at block granularity: a [rows / br, cols / bc] block mask drawn by
// random_pattern, expanded to [rows, cols] (for BSR). rows % br == cols % bc == 0.
std::vector<uint8_t> random_block_pattern(int64_t rows, int64_t cols, int64_t br, int64_t bc, double sparsity,
                                          uint64_t seed);
// Useful flops: SpMM W [m, k] (nnz stored) x X [k, n]: 2 nnz n; SDDMM (A [m, k] @ B [k, n]) at nnz: 2 nnz k.
inline double spmm_flops(int64_t nnz, int64_t n) { return 2.0 * static_cast<double>(nnz) * static_cast<double>(n); }
inline double sddmm_flops(int64_t nnz, int64_t k) { return 2.0 * static_cast<double>(nnz) * static_cast<double>(k); }
inline double dense_gemm_flops(int64_t m, int64_t k, int64_t n) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
}

// ---- devices and peaks -----------------------------------------------------
// The GPU model read from /proc/driver/nvidia (no CUDA headers needed), or "".
std::string gpu_model_name();
// The CPU model from /proc/cpuinfo, or "".
std::string cpu_model_name();

struct Peak {
  double value = kNaN;  // GFLOP/s or GB/s
  std::string source;
};
// Datasheet peaks for known GPUs, by model name; NaN when the model is unknown.
// metric: "gflops" (per dtype) or "gbps".
Peak reference_peak(const std::string& model, DType dtype, const std::string& metric);

}  // namespace coppice::bench
