#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "models/layers.h"
#include "sparse/sparse_impl.h"
#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/io/json.h"

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

MetricsWriter::~MetricsWriter() { close(); }

absl::Status MetricsWriter::open(const std::string& path, bool append) {
  close();
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) {
    return absl::UnavailableError(str_cat("metrics: cannot open '", path, "' for writing: ", std::strerror(errno)));
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

void MetricsWriter::close() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

ModelStats model_stats(const Module& model) {
  ModelStats s;
  for (const auto& [name, p] : model.named_parameters()) {
    const Tensor& v = p.value();
    s.dense_parameters += v.numel();
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
  for (const auto& [name, m] : model.named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(m);
    if (linear == nullptr) continue;
    const Tensor& w = linear->weight().value();
    s.linear_flops_dense += 2 * w.numel();
    s.linear_flops_sparse += 2 * (w.is_dense() ? w.numel() : nnz(w));
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
