#include "tools/bench/bench_util.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "sparse/route_choices.h"
#include "tensor/error.h"
#include "tensor/io/json.h"

namespace coppice::bench {

// ---- command line ----------------------------------------------------------

std::string usage() {
  return "usage: bench [gemm|elementwise|spmm|sddmm|sparsify|all] [--device cpu|cuda|all] [--size N] [--numel N] "
         "[--reps R]\n"
         "             [--warmup W] [--dtype f32,f64,bf16,f16] [--min-sample-ms X] [--json FILE]\n"
         "       bench dp [--device cpu|cuda|all] [--batch B] [--hidden H] [--steps S] [--warmup W] [--sparsity X]\n"
         "             [--variants dense,compact,densified] [--ranks N] [--timeout-s T] [--tf32] [--json FILE]\n"
         "       bench train [--device cpu|cuda|all] [--models mlp,lenet300,vit,gpt] [--formats dense,csr,bsr,nm]\n"
         "             [--sparsity X] [--modes f32,tf32,bf16] [--hidden H] [--batch B] [--steps S] [--warmup W] "
         "[--config-dir D]\n"
         "             [--cuda-graph] [--step-read loss|check|paired] [--optimizer sgd|adamw] [--block N]\n"
         "             [--gelu erf|tanh] [--propagate on|off]\n"
         "       any of them: [--routes-in FILE] [--routes-out FILE]\n"
         "       bench bsr [--dtype bf16,f16,f32] [--hidden H] [--in I] [--batch B] [--block N] [--sparsity X]\n"
         "             [--reps R] [--json FILE]\n"
         "       bench bsr_nm24 [--dtype bf16,f16] [--hidden H] [--in I] [--batch B] [--reps R] [--json FILE]\n"
         "       bench rigl [--device cpu|cuda|all] [--modes f32,tf32,bf16] [--sparsity X] [--hidden H] [--batch B]\n"
         "             [--steps S] [--warmup W] [--json FILE]\n"
         "       bench attention [--dtype bf16,f16,f32] [--reps R] [--json FILE]\n"
         "\n"
         "  gemm         dense matmul [N, N] x [N, N] (default N: 4096 on CUDA, 1024 on the CPU;\n"
         "               dtypes f32 f64 bf16 f16 on CUDA, f32 f64 on the CPU)\n"
         "  elementwise  add of two f32 tensors of --numel elements (default 16M)\n"
         "  spmm         W [m, k] (csr, coo, bsr 32x32) x X [k, n] at sparsity 50/75/90/95/99 %, f32, and\n"
         "               the dense gemm of the same shape: [4096, 4096] x [4096, 4096] on CUDA, x [4096, 256]\n"
         "               on the CPU, and the LeNet-300-100 layers [300, 784], [100, 300], [10, 100] x batch 256;\n"
         "               on CUDA also a 2:4 linear layer's products and gelu forms (bf16, f16; transposable and\n"
         "               not)\n"
         "  sddmm        (A [m, k] @ B [k, n]) at a CSR/COO/BSR pattern [m, n]: m = n = 4096, k 4096 on CUDA,\n"
         "               256 on the CPU; LeNet layers with k = batch 256; dense baseline the full gemm\n"
         "  sparsify     sparsifiers (threshold, random, magnitude, n:m) applied to --numel f32 elements\n"
         "               (default 16M), and a copy of the same tensor for reference\n"
         "  dp           data-parallel training steps (not part of all): MLP H-H-H-H-10 (H 4096 on CUDA, 256 on\n"
         "               the CPU), f32, per-rank batch B (1024 on CUDA, 64 on the CPU), cross-entropy, SGD with\n"
         "               momentum, gradients averaged over ranks by GradientSync; variants dense, compact (the\n"
         "               three HxH weights CSR at --sparsity, default 0.9, nnz values exchanged) and densified\n"
         "               (the same, gradients exchanged dense). One process per rank (tools/launch -n N -- bench\n"
         "               dp: NCCL, one GPU per local rank; rank 0 reports), or --ranks N threads on the CPU\n"
         "               (inproc). --steps S timed steps (20) after --warmup W (5); median step time reported\n"
         "  train        training steps (not part of all; tools/bench/train_bench.cc): the MLP H-H-H-H-10 at batch\n"
         "               B (4096 and 4096 on CUDA, 256 and 64 on the CPU), and the models and batch sizes of the\n"
         "               jobs configs/lenet300_rigl_90.yaml and configs/vit_sparse_attention.yaml (--config-dir),\n"
         "               on synthetic inputs; formats dense, csr and bsr at 90/95/98 %, nm 2:4; modes f32, tf32,\n"
         "               bf16; SGD with momentum; --steps S (10; 3 on the CPU) after --warmup W (3; 1);\n"
         "               --step-read loss: each step reads its loss as the trainer does; check: with the\n"
         "               trainer's non-finite flags folded into the optimizer step and read with it;\n"
         "               paired: the two alternate step by step in one process; --optimizer adamw: the GPT\n"
         "               jobs' update (AdamW lr 6e-4, weight decay 0.1, clipping at norm 1.0) instead of SGD;\n"
         "               --block N: BSR blocks of N x N (32; a power of two); --gelu tanh: the vit's and gpt's\n"
         "               MLPs with GPT-2's tanh GELU instead of the exact one (erf; rows \"<model>+gelu_tanh\");\n"
         "               --propagate on: output rules inferred by sparsity propagation (models/propagation)\n"
         "               attached before the steps (rows \"<model>+propagate\", inferred_rules beside them)\n"
         "  bsr          a BSR linear layer's products (not part of all; CUDA only; bsr_bench.cc): x W^T (and\n"
         "               with the erf gelu and its input written out), dy W (and times gelu'(z) of a given z) and\n"
         "               dy^T x at W's blocks, W [H, I] (H 4096, I = H) in 16/32/64/128 blocks (--block N:\n"
         "               N alone) at 90/95/98 % (--sparsity X: X alone), batch\n"
         "               B (4096), in bf16, f16 and TF32 (--dtype f32), beside cuBLAS's dense x W^T of the same\n"
         "               type; rows carry dense_ms, speedup, fraction_of_ideal (speedup x density),\n"
         "               byte_floor_ms (the product's bytes at the rate of a copy of x in the same call) and\n"
         "               fraction_of_byte_floor\n"
         "  bsr_nm24     BSR-of-2:4 (128 x 64 blocks, 2:4 inside; not part of all; CUDA only; bsr_nm24_bench.cc):\n"
         "               x W^T with W [H, I] (4096 x 4096) at 50/20/10 % of blocks kept, beside BSR 64 x 64 with\n"
         "               as many entries and with the whole blocks, 2:4 alone and cuBLAS dense, bf16 and f16\n"
         "  rigl         a block-RigL mask-update step (not part of all; rigl_bench.cc): bench train's MLP with its\n"
         "               three HxH weights BSR 32x32 at --sparsity (0.9), the update of a RigL job's step (dense-\n"
         "               gradient view, optimizer, prune and regrow of the three layers) with block scores probed\n"
         "               and with dense swaps, beside an ordinary step; rows carry steps_per_update\n"
         "  attention    fused attention (not part of all; CUDA only; attention_bench.cc): forward, and forward\n"
         "               + backward, causal and block-sparse (64-token local + strided blocks), at [B, H, T, d] =\n"
         "               [32, 16, 512, 64], [8, 16, 2048, 64], [16, 16, 1024, 128]; bf16 and f16 by default\n"
         "  --tf32       f32 dense matmuls on CUDA may use TF32 tensor cores (tensor/precision.h)\n"
         "  --size N     gemm's m = n = k (with the elementwise suite alone, its element count); the sparse\n"
         "               suites' big shape becomes N in every dimension (on both devices)\n"
         "  --reps R     timed samples, median reported (default 20); --warmup W untimed calls (3);\n"
         "               the sparse suites on the CPU default to 3 and 1\n"
         "  --json FILE  also write the JSON report to FILE\n"
         "  --routes-out FILE  write the planners' measured route choices (sparse/route_choices.h) to FILE;\n"
         "  --routes-in FILE   take FILE's choices instead of measuring: a run under a profiler then takes\n"
         "               the routes a plain run chose (tools/device/run_gpt.sh breakdown does so)\n"
         "Prints one JSON object on stdout; progress goes to stderr.\n";
}

namespace {

absl::StatusOr<int64_t> parse_int(const std::string& flag, const std::string& text, int64_t min) {
  if (text.empty()) return absl::InvalidArgumentError(str_cat(flag, ": expected an integer, got ''"));
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) {
    return absl::InvalidArgumentError(str_cat(flag, ": expected an integer, got '", text, "'"));
  }
  if (v < min) return absl::InvalidArgumentError(str_cat(flag, ": must be at least ", min, ", got ", v));
  return static_cast<int64_t>(v);
}

absl::StatusOr<double> parse_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0) || std::isinf(v)) {
    return absl::InvalidArgumentError(str_cat(flag, ": expected a non-negative number, got '", text, "'"));
  }
  return v;
}

// A comma-separated list of names, each one of `known`.
absl::StatusOr<std::vector<std::string>> parse_names(const std::string& flag, const std::string& value,
                                                     const std::vector<std::string>& known) {
  std::vector<std::string> out;
  std::stringstream ss(value);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(
          str_cat(flag, ": unknown name '", name, "' (expected ", str_join(known, ", "), ")"));
    }
    out.push_back(name);
  }
  if (out.empty()) return absl::InvalidArgumentError(str_cat(flag, ": empty list"));
  return out;
}

}  // namespace

absl::StatusOr<Config> parse_args(const std::vector<std::string>& args) {
  Config c;
  bool suite_given = false, size_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      c.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (suite_given) return absl::InvalidArgumentError(str_cat("more than one suite given ('", arg, "')"));
      suite_given = true;
      if (arg != "all") {
        if (arg != "gemm" && arg != "elementwise" && arg != "spmm" && arg != "sddmm" && arg != "sparsify" &&
            arg != "dp" && arg != "train" && arg != "bsr" && arg != "bsr_nm24" && arg != "rigl" && arg != "attention") {
          return absl::InvalidArgumentError(str_cat("unknown suite '", arg,
                                                    "' (expected gemm, elementwise, spmm, sddmm, sparsify, dp, "
                                                    "train, bsr, bsr_nm24, rigl, attention or all)"));
        }
        c.gemm = arg == "gemm";
        c.elementwise = arg == "elementwise";
        c.spmm = arg == "spmm";
        c.sddmm = arg == "sddmm";
        c.sparsify = arg == "sparsify";
        c.dp = arg == "dp";
        c.train = arg == "train";
        c.bsr = arg == "bsr";
        c.bsr_nm24 = arg == "bsr_nm24";
        c.rigl = arg == "rigl";
        c.attention = arg == "attention";
      }
      continue;
    }
    if (arg == "--tf32") {
      c.allow_tf32 = true;
      continue;
    }
    if (arg == "--cuda-graph") {
      c.cuda_graph = true;
      continue;
    }
    std::string flag = arg, value;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) flag = arg.substr(0, eq);
    static const char* const kFlags[] = {
        "--device",        "--size",   "--numel",   "--reps",      "--warmup",     "--dtype",     "--json",
        "--min-sample-ms", "--batch",  "--hidden",  "--steps",     "--sparsity",   "--variants",  "--ranks",
        "--timeout-s",     "--models", "--formats", "--modes",     "--config-dir", "--step-read", "--optimizer",
        "--block",         "--gelu",   "--in",      "--propagate", "--routes-in",  "--routes-out"};
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags)) {
      return absl::InvalidArgumentError(str_cat("unknown flag '", flag, "'"));
    }
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(str_cat(flag, ": missing value"));
      value = args[++i];
    }
    if (flag == "--device") {
      if (value == "cpu") {
        c.cuda = false;
      } else if (value == "cuda") {
        c.cpu = false;
      } else if (value != "all") {
        return absl::InvalidArgumentError(str_cat("--device: expected cpu, cuda or all, got '", value, "'"));
      }
    } else if (flag == "--size") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      c.size = *v;
      size_given = true;
    } else if (flag == "--numel") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      c.numel = *v;
    } else if (flag == "--reps") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      if (*v > 1000000) return absl::InvalidArgumentError("--reps: at most 1000000");
      c.reps = static_cast<int>(*v);
      c.reps_given = true;
    } else if (flag == "--warmup") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 0);
      if (!v.ok()) return v.status();
      if (*v > 1000000) return absl::InvalidArgumentError("--warmup: at most 1000000");
      c.warmup = static_cast<int>(*v);
      c.warmup_given = true;
    } else if (flag == "--min-sample-ms") {
      absl::StatusOr<double> v = parse_double(flag, value);
      if (!v.ok()) return v.status();
      c.min_sample_ms = *v;
    } else if (flag == "--dtype") {
      c.dtypes.clear();
      std::stringstream ss(value);
      std::string name;
      while (std::getline(ss, name, ',')) {
        DType t;
        if (!dtype_from_name(name, &t) || !is_floating(t)) {
          return absl::InvalidArgumentError(
              str_cat("--dtype: unknown or non-floating dtype '", name, "' (expected f32, f64, bf16, f16)"));
        }
        c.dtypes.push_back(t);
      }
      if (c.dtypes.empty()) return absl::InvalidArgumentError("--dtype: empty list");
    } else if (flag == "--batch" || flag == "--hidden" || flag == "--in") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      (flag == "--batch" ? c.batch : flag == "--hidden" ? c.hidden : c.in_features) = *v;
    } else if (flag == "--steps" || flag == "--ranks") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      if (*v > 1000000) return absl::InvalidArgumentError(str_cat(flag, ": at most 1000000"));
      (flag == "--steps" ? c.steps : c.ranks) = static_cast<int>(*v);
    } else if (flag == "--sparsity") {
      absl::StatusOr<double> v = parse_double(flag, value);
      if (!v.ok()) return v.status();
      if (*v >= 1) return absl::InvalidArgumentError(str_cat("--sparsity: must be below 1, got ", value));
      c.sparsity = *v;
      c.sparsity_given = true;
    } else if (flag == "--timeout-s") {
      absl::StatusOr<double> v = parse_double(flag, value);
      if (!v.ok()) return v.status();
      if (*v <= 0) return absl::InvalidArgumentError("--timeout-s: must be positive");
      c.timeout_s = *v;
    } else if (flag == "--variants") {
      absl::StatusOr<std::vector<std::string>> names = parse_names(flag, value, {"dense", "compact", "densified"});
      if (!names.ok()) return names.status();
      c.variants = *names;
    } else if (flag == "--models" || flag == "--formats" || flag == "--modes") {
      static const std::vector<std::string> kModels = {"mlp", "lenet300", "vit", "gpt", "gpt_moe"};
      static const std::vector<std::string> kFormats = {"dense", "csr", "bsr", "nm"};
      static const std::vector<std::string> kModes = {"f32", "tf32", "bf16"};
      const std::vector<std::string>& known = flag == "--models" ? kModels : flag == "--formats" ? kFormats : kModes;
      std::vector<std::string>& list = flag == "--models"    ? c.train_models
                                       : flag == "--formats" ? c.train_formats
                                                             : c.train_modes;
      absl::StatusOr<std::vector<std::string>> names = parse_names(flag, value, known);
      if (!names.ok()) return names.status();
      list = *names;
    } else if (flag == "--step-read") {
      if (value != "loss" && value != "check" && value != "paired")
        return absl::InvalidArgumentError(str_cat("--step-read: 'loss', 'check' or 'paired', got '", value, "'"));
      c.step_read = value;
    } else if (flag == "--block") {
      absl::StatusOr<int64_t> v = parse_int(flag, value, 1);
      if (!v.ok()) return v.status();
      if (*v > 4096 || (*v & (*v - 1)) != 0)
        return absl::InvalidArgumentError(str_cat("--block: a power of two up to 4096, got ", value));
      c.train_block = *v;
      c.block_given = true;
    } else if (flag == "--propagate") {
      if (value != "on" && value != "off")
        return absl::InvalidArgumentError(str_cat("--propagate: 'on' or 'off', got '", value, "'"));
      c.train_propagate = value == "on";
    } else if (flag == "--gelu") {
      if (value != "erf" && value != "tanh")
        return absl::InvalidArgumentError(str_cat("--gelu: 'erf' or 'tanh', got '", value, "'"));
      c.train_gelu = value;
    } else if (flag == "--optimizer") {
      if (value != "sgd" && value != "adamw")
        return absl::InvalidArgumentError(str_cat("--optimizer: 'sgd' or 'adamw', got '", value, "'"));
      c.optimizer = value;
    } else if (flag == "--config-dir") {
      if (value.empty()) return absl::InvalidArgumentError("--config-dir: empty directory name");
      c.config_dir = value;
    } else if (flag == "--json") {
      if (value.empty()) return absl::InvalidArgumentError("--json: empty file name");
      c.json_path = value;
    } else if (flag == "--routes-in" || flag == "--routes-out") {
      if (value.empty()) return absl::InvalidArgumentError(str_cat(flag, ": empty file name"));
      (flag == "--routes-in" ? c.routes_in : c.routes_out) = value;
    } else {
      return absl::InvalidArgumentError(str_cat("unknown flag '", flag, "'"));
    }
  }
  // With the elementwise (or sparsify) suite alone, --size means its element count.
  if (size_given && (c.elementwise || c.sparsify) && !c.gemm && !c.spmm && !c.sddmm && c.numel == 0) {
    c.numel = c.size;
  }
  return c;
}

absl::Status restore_routes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(str_cat("--routes-in: cannot read '", path, "'"));
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  try {
    restore_route_choices(text, path);
  } catch (const Error& e) { return absl::InvalidArgumentError(str_cat("--routes-in: ", e.what())); }
  return absl::OkStatus();
}

absl::Status write_routes(const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << route_choices_json() << "\n";
  f.close();
  if (!f) return absl::UnavailableError(str_cat("--routes-out: cannot write '", path, "'"));
  return absl::OkStatus();
}

// ---- timing ----------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void fill_timing(const Timing& t, Result* r) {
  r->median_ms = t.median_ms;
  r->min_ms = t.min_ms;
  r->max_ms = t.max_ms;
  r->reps = static_cast<int>(t.samples_ms.size());
  r->inner = t.inner;
}

Timing time_op(const std::function<void()>& fn, const std::function<void()>& sync, const TimingOptions& options,
               const std::function<double()>& clock) {
  std::function<double()> now = clock;
  if (!now) {
    now = [] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
  for (int i = 0; i < options.warmup; ++i) fn();
  sync();

  Timing t;
  double t0 = now();
  fn();
  sync();
  double once = now() - t0;
  if (options.min_sample_ms > 0 && once < options.min_sample_ms) {
    double want = once > 0 ? std::ceil(options.min_sample_ms / once) : options.max_inner;
    t.inner = static_cast<int>(std::min<double>(want, std::max(options.max_inner, 1)));
  }
  for (int r = 0; r < options.reps; ++r) {
    sync();
    double start = now();
    for (int i = 0; i < t.inner; ++i) fn();
    sync();
    t.samples_ms.push_back((now() - start) / t.inner);
  }
  t.median_ms = median(t.samples_ms);
  if (!t.samples_ms.empty()) {
    t.min_ms = *std::min_element(t.samples_ms.begin(), t.samples_ms.end());
    t.max_ms = *std::max_element(t.samples_ms.begin(), t.samples_ms.end());
  }
  return t;
}

// ---- results ---------------------------------------------------------------

double Result::gflops() const { return flops / (median_ms * 1e-3) / 1e9; }
double Result::gbps() const { return bytes / (median_ms * 1e-3) / 1e9; }

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string json_string(const std::string& s) { return json::quote(s); }

std::string result_to_json(const Result& r) {
  const bool is_gemm = std::isfinite(r.flops);
  const double throughput = is_gemm ? r.gflops() : r.gbps();
  const char* metric = is_gemm ? "gflops" : "gbps";
  std::string s = "{";
  s += "\"suite\": " + json_string(r.suite);
  s += ", \"op\": " + json_string(r.op);
  s += ", \"device\": " + json_string(r.device);
  s += ", \"device_name\": " + json_string(r.device_name);
  s += ", \"dtype\": " + json_string(r.dtype);
  s += ", \"shape\": [" + str_join(r.shape, ", ") + "]";
  if (!r.format.empty()) s += ", \"format\": " + json_string(r.format);
  if (std::isfinite(r.sparsity)) s += ", \"sparsity\": " + json_number(r.sparsity);
  if (r.nnz >= 0) s += str_cat(", \"nnz\": ", r.nnz);
  s += ", \"status\": " + json_string(r.status);
  s += ", \"median_ms\": " + json_number(r.median_ms);
  s += ", \"min_ms\": " + json_number(r.min_ms);
  s += ", \"max_ms\": " + json_number(r.max_ms);
  s += str_cat(", \"", metric, "\": ", json_number(throughput));
  s += str_cat(", \"peak_", metric, "\": ", json_number(r.peak));
  s += ", \"fraction_of_peak\": " + json_number(throughput / r.peak);
  s += ", \"peak_source\": " + json_string(r.peak_source);
  s += str_cat(", \"reps\": ", r.reps, ", \"inner\": ", r.inner);
  for (const auto& [k, v] : r.extra) {
    // Counts (bytes, collectives) exactly; other values as json_number.
    const bool integral = std::isfinite(v) && std::fabs(v) < 9e15 && v == std::floor(v);
    s += ", " + json_string(k) + ": " + (integral ? str_cat(static_cast<int64_t>(v)) : json_number(v));
  }
  s += "}";
  return s;
}

std::string report_to_json(const Report& report) {
  std::string s = "{";
  for (const auto& [k, v] : report.info) s += json_string(k) + ": " + json_string(v) + ", ";
  for (const auto& [k, v] : report.numbers) s += json_string(k) + ": " + json_number(v) + ", ";
  s += "\"results\": [";
  for (size_t i = 0; i < report.results.size(); ++i) {
    s += i == 0 ? "\n  " : ",\n  ";
    s += result_to_json(report.results[i]);
  }
  s += report.results.empty() ? "]}" : "\n]}";
  return s;
}

// ---- sparse patterns and work ---------------------------------------------

int64_t pattern_nnz(int64_t numel, double sparsity) {
  COPPICE_CHECK(numel >= 0 && sparsity >= 0 && sparsity <= 1, "pattern_nnz: numel ", numel, ", sparsity ", sparsity);
  int64_t k = std::llround(static_cast<double>(numel) * (1.0 - sparsity));
  return std::min(std::max<int64_t>(k, 0), numel);
}

std::vector<uint8_t> random_pattern(int64_t rows, int64_t cols, double sparsity, uint64_t seed) {
  COPPICE_CHECK(rows >= 0 && cols >= 0, "random_pattern: shape [", rows, ", ", cols, "]");
  const int64_t numel = rows * cols;
  int64_t need = pattern_nnz(numel, sparsity);
  std::vector<uint8_t> mask(static_cast<size_t>(numel), 0);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < numel && need > 0; ++i) {
    // Keep position i with probability need / (positions left): exactly `need` kept, uniformly.
    if (static_cast<double>(numel - i) * u(rng) < static_cast<double>(need)) {
      mask[static_cast<size_t>(i)] = 1;
      --need;
    }
  }
  return mask;
}

std::vector<uint8_t> random_block_pattern(int64_t rows, int64_t cols, int64_t br, int64_t bc, double sparsity,
                                          uint64_t seed) {
  COPPICE_CHECK(br > 0 && bc > 0 && rows % br == 0 && cols % bc == 0, "random_block_pattern: block ", br, "x", bc,
                " does not divide [", rows, ", ", cols, "]");
  const int64_t brows = rows / br, bcols = cols / bc;
  std::vector<uint8_t> blocks = random_pattern(brows, bcols, sparsity, seed);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * cols), 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      mask[static_cast<size_t>(i * cols + j)] = blocks[static_cast<size_t>((i / br) * bcols + j / bc)];
    }
  }
  return mask;
}

// ---- devices and peaks -----------------------------------------------------

std::string gpu_model_name() {
  const std::string root = "/proc/driver/nvidia/gpus";
  std::vector<std::string> gpus;
  if (DIR* d = opendir(root.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') gpus.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(gpus.begin(), gpus.end());
  for (const std::string& g : gpus) {
    std::ifstream f(root + "/" + g + "/information");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("Model:", 0) != 0) continue;
      size_t b = line.find_first_not_of(" \t", 6);
      return b == std::string::npos ? "" : line.substr(b);
    }
  }
  return "";
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

namespace {
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
}  // namespace

Peak reference_peak(const std::string& model, DType dtype, const std::string& metric) {
  // Datasheet figures: dense (no structured sparsity); f64 on tensor cores,
  // f32 without TF32, bf16/f16 on tensor cores; memory bandwidth in GB/s.
  struct Row {
    const char* name;
    double f64, f32, f16, gbps;
  };
  const Row h100_sxm{"H100 SXM5", 67e3, 67e3, 989e3, 3350};
  const Row h100_pcie{"H100 PCIe", 51e3, 51e3, 756e3, 2000};
  const Row h100_nvl{"H100 NVL", 60e3, 60e3, 835e3, 3900};
  const Row h200_sxm{"H200 SXM", 67e3, 67e3, 989e3, 4800};
  const Row h200_nvl{"H200 NVL", 60e3, 60e3, 835e3, 4800};
  const Row* row = nullptr;
  if (contains(model, "H200")) {
    row = contains(model, "NVL") ? &h200_nvl : &h200_sxm;
  } else if (contains(model, "H100")) {
    row = contains(model, "PCIe") ? &h100_pcie : contains(model, "NVL") ? &h100_nvl : &h100_sxm;
  }
  Peak p;
  if (row == nullptr) return p;
  p.source = str_cat("NVIDIA ", row->name, " datasheet (dense",
                     metric == "gbps" ? ", HBM bandwidth)" : "; f64 and 16-bit on tensor cores, f32 without TF32)");
  if (metric == "gbps") {
    p.value = row->gbps;
  } else if (dtype == DType::kF64) {
    p.value = row->f64;
  } else if (dtype == DType::kF32) {
    p.value = row->f32;
  } else if (dtype == DType::kBF16 || dtype == DType::kF16) {
    p.value = row->f16;
  } else {
    p.source.clear();
  }
  return p;
}

}  // namespace coppice::bench
