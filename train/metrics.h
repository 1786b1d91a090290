// Training metrics: JSON-lines records, and the model statistics the final
// summary reports (per-layer density, parameter counts and Linear FLOPs dense
// versus sparse).
//
// A metrics file holds one JSON object per line. Training records carry
// "kind": "train" with step, epoch, loss, accuracy, lr, per-layer density,
// time and samples/s (and peak memory when known); mask-update steps add
// "mask_update" (per layer dropped, grown, ITOP rate); evaluations are
// "kind": "eval" with the split's loss and accuracy; the run ends with
// "kind": "summary". tools/plot draws them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/module.h"

namespace coppice {

// A flat JSON object built member by member, in insertion order. Doubles are
// written with 17 significant digits; NaN and infinities as null.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(const std::string& key, bool value);
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonObject& add(const std::string& key, const JsonObject& value);
  JsonObject& add(const std::string& key, const std::map<std::string, double>& values);
  JsonObject& add(const std::string& key, const std::map<std::string, int64_t>& values);
  // `json` must be a complete JSON value.
  JsonObject& add_raw(const std::string& key, const std::string& json);
  bool empty() const { return body_.empty(); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

std::string json_number(double value);

// Appends JSON lines to a file (created or truncated by open, or appended to
// when `append`, as when a run resumes). Each record is flushed as written.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  absl::Status open(const std::string& path, bool append = false);
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // No-op when not open.
  absl::Status write(const JsonObject& record);
  // Closes the file; an error names it when the close fails (the last
  // buffered bytes may be lost). The destructor closes without checking.
  absl::Status close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Drops from the metrics file at `path` the records of steps after
// `last_step` and every summary (and any line cut short), as a run resumed
// from step `last_step` writes them again; the file is replaced atomically.
// A missing file is fine; anything but a regular file (a device) is left as it is.
absl::Status truncate_metrics(const std::string& path, int64_t last_step);

// Statistics of one weight (a parameter of dim >= 2) as forward uses it:
// through its view where it has one (Module::set_parameter_view; SR-STE's
// dense weights count as their n:m projections).
struct LayerStats {
  std::string name;
  std::string format;  // "dense", "csr", ...
  int64_t numel = 0;
  int64_t nnz = 0;
  double density = 1.0;
};

struct ModelStats {
  std::vector<LayerStats> layers;  // every parameter of dim >= 2, in order
  int64_t dense_parameters = 0;    // every parameter's numel
  int64_t stored_parameters = 0;   // nnz for sparse ones (Module::num_parameters)
  // Forward multiply-adds x 2 of every Linear layer for one example (one row
  // of input), with the weight dense and as forward uses it (2 * nnz); bias
  // excluded. A mixture of experts counts the top_k experts a token runs
  // (top_k / experts of its expert weights) and its router.
  int64_t linear_flops_dense = 0;
  int64_t linear_flops_sparse = 0;
};

ModelStats model_stats(const Module& model);
// name -> density of every parameter of dim >= 2.
std::map<std::string, double> layer_densities(const Module& model);
// Peak bytes the CPU allocator handed out since the process started (or its
// last reset_peak); -1 when unknown.
int64_t peak_cpu_memory_bytes();

}  // namespace coppice
