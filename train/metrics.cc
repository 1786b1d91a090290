#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "autograd/no_grad.h"
#include "models/layers.h"
#include "models/moe.h"
#include "sparse/sparse_impl.h"
#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/io/input_file.h"
#include "tensor/io/json.h"
#include "train/atomic_file.h"

namespace coppice {

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

JsonObject& JsonObject::add_raw(const std::string& key, const std::string& json) {
  if (!body_.empty()) body_ += ',';
  body_ += json::quote(key);
  body_ += ':';
  body_ += json;
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, double value) { return add_raw(key, json_number(value)); }
JsonObject& JsonObject::add(const std::string& key, int64_t value) { return add_raw(key, std::to_string(value)); }
JsonObject& JsonObject::add(const std::string& key, bool value) { return add_raw(key, value ? "true" : "false"); }
JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  return add_raw(key, json::quote(value));
}
JsonObject& JsonObject::add(const std::string& key, const JsonObject& value) { return add_raw(key, value.str()); }
JsonObject& JsonObject::add(const std::string& key, const std::map<std::string, double>& values) {
  JsonObject o;
  for (const auto& [k, v] : values) o.add(k, v);
  return add(key, o);
}
JsonObject& JsonObject::add(const std::string& key, const std::map<std::string, int64_t>& values) {
  JsonObject o;
  for (const auto& [k, v] : values) o.add(k, v);
  return add(key, o);
}

namespace {

// The "step" of a record as MetricsWriter writes them: "kind" first, then
// plain members, with "step" before any nested object; -1 for another line.
int64_t record_step(const std::string& line, std::string* kind) {
  static const std::string kKind = "{\"kind\":\"";
  if (line.compare(0, kKind.size(), kKind) != 0 || line.back() != '}') return -1;
  const size_t kind_end = line.find('"', kKind.size());
  if (kind_end == std::string::npos) return -1;
  *kind = line.substr(kKind.size(), kind_end - kKind.size());
  const size_t at = line.find(",\"step\":", kind_end);
  if (at == std::string::npos) return -1;
  int64_t step = 0;
  size_t i = at + 8;
  if (i >= line.size() || line[i] < '0' || line[i] > '9') return -1;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9' && step < (int64_t{1} << 58); ++i) {
    step = step * 10 + (line[i] - '0');
  }
  return step;
}

}  // namespace

absl::Status truncate_metrics(const std::string& path, int64_t last_step) {
  // Only a regular file holds records to cut back; a device (/dev/null) is
  // neither read nor replaced (a rename over it would replace the device).
  const absl::StatusOr<mode_t> type = file_type_at(path);
  if (absl::IsNotFound(type.status())) return absl::OkStatus();
  if (!type.ok()) return absl::UnavailableError(str_cat("metrics: ", type.status().message()));
  if (!S_ISREG(*type)) return absl::OkStatus();
  // Read as every input is (tensor/io/input_file.h): a FIFO put in its
  // place since cannot stall the resume.
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return absl::UnavailableError(str_cat("metrics: ", file.status().message()));
  std::string kept, line;
  char buf[1 << 16];
  auto take = [&] {
    std::string kind;
    const int64_t step = record_step(line, &kind);
    if (step >= 0 && step <= last_step && kind != "summary") kept += line + "\n";
    line.clear();
  };
  for (;;) {
    const absl::StatusOr<size_t> n = file->read_some(buf, sizeof buf);
    if (!n.ok()) return absl::UnavailableError(str_cat("metrics: ", n.status().message()));
    if (*n == 0) break;
    for (size_t i = 0; i < *n; ++i) {
      if (buf[i] == '\n') {
        take();
      } else {
        line += buf[i];
      }
    }
  }
  // A last line without its newline was cut short by a crash: dropped.
  absl::Status st = write_file_atomically(path, kept);
  if (!st.ok()) return absl::UnavailableError(str_cat("metrics: ", st.message()));
  return absl::OkStatus();
}

MetricsWriter::~MetricsWriter() { (void)close(); }

absl::Status MetricsWriter::open(const std::string& path, bool append) {
  (void)close();
  // Opened without blocking and judged by what was opened: a FIFO put in
  // the file's place after validation must not stall the run.
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (append ? O_APPEND : 0), 0644);
  if (fd < 0) {
    return absl::UnavailableError(str_cat("metrics: cannot open '", path, "' for writing: ", std::strerror(errno)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !(S_ISREG(info.st_mode) || S_ISCHR(info.st_mode))) {
    ::close(fd);
    return absl::UnavailableError(
        str_cat("metrics: '", path, "' is not a regular file or a character device; refusing to write to it"));
  }
  if ((!append && S_ISREG(info.st_mode) && ::ftruncate(fd, 0) != 0) ||
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
      (file_ = ::fdopen(fd, append ? "a" : "w")) == nullptr) {
    const absl::Status st =
        absl::UnavailableError(str_cat("metrics: cannot open '", path, "' for writing: ", std::strerror(errno)));
    ::close(fd);
    return st;
  }
  path_ = path;
  return absl::OkStatus();
}

absl::Status MetricsWriter::write(const JsonObject& record) {
  if (file_ == nullptr) return absl::OkStatus();
  const std::string line = record.str() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::DataLossError(str_cat("metrics: cannot write to '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return absl::DataLossError(str_cat("metrics: cannot close '", path_, "': ", std::strerror(errno)));
  return absl::OkStatus();
}

ModelStats model_stats(const Module& model) {
  ModelStats s;
  NoGradGuard no_grad;  // views (SR-STE's projections) record nothing here
  for (const auto& [name, p] : model.named_parameters()) {
    s.dense_parameters += p.value().numel();
    // What forward uses: a weight seen through a view counts as its view.
    const Tensor v = model.viewed_parameter(name).value();
    if (v.dim() < 2) continue;
    LayerStats l;
    l.name = name;
    l.format = std::string(v.format());
    l.numel = v.numel();
    l.nnz = v.is_dense() ? v.numel() : nnz(v);
    l.density = l.numel == 0 ? 1.0 : static_cast<double>(l.nnz) / static_cast<double>(l.numel);
    s.layers.push_back(l);
  }
  s.stored_parameters = model.num_parameters();
  // 2 * the weight's entries as forward uses them (dense, and stored) * num / den.
  auto add_flops = [&s](const Tensor& w, int64_t num, int64_t den) {
    s.linear_flops_dense += 2 * w.numel() * num / den;
    s.linear_flops_sparse += 2 * (w.is_dense() ? w.numel() : nnz(w)) * num / den;
  };
  std::vector<const Module*> modules = {&model};  // the model itself may be a Linear or a MoE
  for (const auto& [name, m] : model.named_modules()) modules.push_back(m);
  for (const Module* m : modules) {
    if (const auto* moe = dynamic_cast<const MoE*>(m)) {
      // A token runs top_k of the experts: top_k / experts of w1's and w2's
      // products (its router is a Linear, counted below).
      const int64_t k = moe->options().top_k, e = moe->options().experts;
      for (const char* p : {"w1", "w2"}) add_flops(moe->viewed_parameter(p).value(), k, e);
      continue;
    }
    if (const auto* linear = dynamic_cast<const Linear*>(m))
      add_flops(linear->viewed_parameter("weight").value(), 1, 1);
  }
  return s;
}

std::map<std::string, double> layer_densities(const Module& model) {
  std::map<std::string, double> out;
  for (const LayerStats& l : model_stats(model).layers) out[l.name] = l.density;
  return out;
}

int64_t peak_cpu_memory_bytes() { return cpu_allocator().stats().peak_allocated_bytes; }

}  // namespace coppice
