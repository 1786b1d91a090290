#include "train/checkpoint.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <set>

#include "optim/finite_check.h"
#include "optim/state_io.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

constexpr char kModelPrefix[] = "model.";
constexpr char kOptimPrefix[] = "optim.";
constexpr char kUpdaterPrefix[] = "updater.";
constexpr char kTrainerPrefix[] = "trainer.";
constexpr char kExtraPrefix[] = "trainer.extra.";
constexpr char kJobPrefix[] = "job.";
constexpr char kChecksumPrefix[] = "checksum.";
constexpr char kMetadataChecksum[] = "checksum.metadata";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool parse_i64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20 || s[0] < '0' || s[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

absl::Status corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(str_cat("checkpoint '", path, "': ", what));
}

absl::Status misfit(const std::string& path, const std::string& what) {
  return absl::FailedPreconditionError(str_cat("checkpoint '", path, "': ", what));
}

std::string hex32(uLong crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return buf;
}

uLong crc_update(uLong crc, const std::string& s) {
  return crc32_z(crc, reinterpret_cast<const Bytef*>(s.data()), s.size());
}

// The checksum of one stored entry: its name, dtype and shape, then its
// bytes (`t` is a CPU contiguous tensor, as parse_safetensors returns them).
std::string entry_checksum(const std::string& name, const Tensor& t) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc_update(crc, str_cat(name, '\0', safetensors_dtype_name(t.dtype()), '\0', shape_to_string(t.shape()), '\0'));
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  if (bytes > 0) crc = crc32_z(crc, static_cast<const Bytef*>(t.data_ptr()), bytes);
  return hex32(crc);
}

// The checksum of every metadata entry but the checksums themselves.
std::string metadata_checksum(const std::map<std::string, std::string>& metadata) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [k, v] : metadata) {
    if (!starts_with(k, kChecksumPrefix)) crc = crc_update(crc, str_cat(k, '\0', v, '\0'));
  }
  return hex32(crc);
}

// Every entry and the metadata against their recorded checksums; any entry
// without one, or a checksum without its entry, is corruption too.
absl::Status verify_checksums(const SafetensorsFile& file, const std::string& path) {
  std::set<std::string> entries;
  for (const auto& [name, t] : file.tensors) {
    entries.insert(name);
    auto it = file.metadata.find(kChecksumPrefix + name);
    if (it == file.metadata.end()) return corrupt(path, str_cat("entry '", name, "' has no checksum"));
    if (it->second != entry_checksum(name, t)) {
      return corrupt(path, str_cat("entry '", name, "' does not match its checksum (the file is corrupted)"));
    }
  }
  auto meta = file.metadata.find(kMetadataChecksum);
  if (meta == file.metadata.end()) return corrupt(path, "no metadata checksum ('checksum.metadata')");
  if (meta->second != metadata_checksum(file.metadata)) {
    return corrupt(path, "the metadata does not match its checksum (the file is corrupted)");
  }
  for (const auto& [k, v] : file.metadata) {
    if (starts_with(k, kChecksumPrefix) && k != kMetadataChecksum &&
        entries.count(k.substr(sizeof(kChecksumPrefix) - 1)) == 0) {
      return corrupt(path, str_cat("checksum '", k, "' names no entry (the file is corrupted)"));
    }
  }
  return absl::OkStatus();
}

// The trainer.* fields, each checked for presence, form and range.
absl::Status read_trainer_state(const std::map<std::string, std::string>& meta, const std::string& path,
                                TrainerState& state, bool& has_updater) {
  static const std::set<std::string> kKnown = {"trainer.format",  "trainer.step",        "trainer.epoch",
                                               "trainer.batch",   "trainer.rng_seed",    "trainer.rng_offset",
                                               "trainer.lr_step", "trainer.data_seed",   "trainer.has_updater",
                                               "trainer.run_id",  "trainer.resumed_from"};
  for (const auto& [k, v] : meta) {
    if (starts_with(k, kTrainerPrefix) && !starts_with(k, kExtraPrefix) && kKnown.count(k) == 0) {
      return corrupt(path, str_cat("unknown metadata field '", k, "'"));
    }
  }
  auto get = [&](const std::string& key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  for (const auto& [key, out, low] :
       std::vector<std::tuple<std::string, int64_t*, int64_t>>{{"trainer.step", &state.step, 0},
                                                               {"trainer.epoch", &state.epoch, 0},
                                                               {"trainer.batch", &state.batch, 0},
                                                               {"trainer.lr_step", &state.lr_step, -1}}) {
    const std::string* v = get(key);
    if (v == nullptr || !parse_i64(*v, out))
      return corrupt(path, str_cat("metadata '", key, "' is missing or not an integer"));
    if (*out < low) return corrupt(path, str_cat("metadata '", key, "' is ", *out, ", below its least value ", low));
  }
  for (const auto& [key, out] :
       std::vector<std::pair<std::string, uint64_t*>>{{"trainer.rng_seed", &state.rng_seed},
                                                      {"trainer.rng_offset", &state.rng_offset},
                                                      {"trainer.data_seed", &state.data_seed}}) {
    const std::string* v = get(key);
    if (v == nullptr || !parse_u64(*v, out)) {
      return corrupt(path, str_cat("metadata '", key, "' is missing or not an unsigned 64-bit integer"));
    }
  }
  const std::string* updater = get("trainer.has_updater");
  if (updater == nullptr || (*updater != "0" && *updater != "1")) {
    return corrupt(path, "metadata 'trainer.has_updater' is missing or not 0 or 1");
  }
  has_updater = *updater == "1";
  const std::string* run_id = get("trainer.run_id");
  if (run_id != nullptr && !run_id->empty() && !is_run_id(*run_id)) {
    return corrupt(path, str_cat("metadata 'trainer.run_id' is not a run id (16 hex digits): '", *run_id, "'"));
  }
  if (run_id != nullptr) state.run_id = *run_id;
  if (const std::string* from = get("trainer.resumed_from")) state.resumed_from = *from;
  for (const auto& [k, v] : meta) {
    if (starts_with(k, kExtraPrefix)) state.extra[k.substr(sizeof(kExtraPrefix) - 1)] = v;
    if (starts_with(k, kJobPrefix)) state.fingerprint[k.substr(sizeof(kJobPrefix) - 1)] = v;
  }
  return absl::OkStatus();
}

}  // namespace

void name_parameters(const Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.name() != name) p.set_name(name);
  }
}

absl::StatusOr<std::string> serialize_checkpoint(const Module& model, const Optimizer& optimizer,
                                                 const MaskState* updater, const TrainerState& state) {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(kModelPrefix + name, t);

  auto optim_bytes = serialize_optimizer_state(optimizer);
  if (!optim_bytes.ok()) return optim_bytes.status();
  auto optim_file = parse_safetensors(*optim_bytes, "optimizer state");
  if (!optim_file.ok()) return optim_file.status();
  for (auto& [name, t] : optim_file->tensors) tensors.emplace_back(kOptimPrefix + name, t);
  for (auto& [key, value] : optim_file->metadata) metadata[kOptimPrefix + key] = value;

  if (updater != nullptr) {
    for (const auto& [name, t] : updater->state_tensors()) tensors.emplace_back(kUpdaterPrefix + name, t);
  }
  metadata["trainer.format"] = kCheckpointFormat;
  metadata["trainer.step"] = std::to_string(state.step);
  metadata["trainer.epoch"] = std::to_string(state.epoch);
  metadata["trainer.batch"] = std::to_string(state.batch);
  metadata["trainer.rng_seed"] = std::to_string(state.rng_seed);
  metadata["trainer.rng_offset"] = std::to_string(state.rng_offset);
  metadata["trainer.lr_step"] = std::to_string(state.lr_step);
  metadata["trainer.data_seed"] = std::to_string(state.data_seed);
  metadata["trainer.has_updater"] = updater != nullptr ? "1" : "0";
  metadata["trainer.run_id"] = state.run_id;
  metadata["trainer.resumed_from"] = state.resumed_from;
  for (const auto& [k, v] : state.extra) metadata[kExtraPrefix + k] = v;
  for (const auto& [k, v] : state.fingerprint) metadata[kJobPrefix + k] = v;

  // A checkpoint is a state to go back to: one that holds an inf or a NaN
  // (a diverged run's) is never written. A full scan: checkpoints are rare.
  for (const auto& [name, t] : tensors) {
    if (!all_finite(t)) {
      return absl::FailedPreconditionError(str_cat("checkpoint: '", name,
                                                   "' holds non-finite values (inf or NaN); a checkpoint is never "
                                                   "written with them"));
    }
  }

  auto flat = flatten_sparse_tensors(tensors, metadata);
  if (!flat.ok()) return flat.status();
  return seal_checkpoint(std::move(*flat));
}

absl::StatusOr<std::string> seal_checkpoint(SafetensorsFile file) {
  // The bytes the file will hold, on the host once; each entry's checksum
  // is taken over exactly those.
  for (auto& [name, t] : file.tensors) {
    t = t.to(Device::cpu()).contiguous();
    file.metadata[kChecksumPrefix + name] = entry_checksum(name, t);
  }
  file.metadata[kMetadataChecksum] = metadata_checksum(file.metadata);
  return serialize_safetensors(file.tensors, file.metadata);
}

absl::StatusOr<std::string> save_checkpoint(const std::string& dir, const Module& model, const Optimizer& optimizer,
                                            const MaskState* updater, const TrainerState& state, int64_t keep_last,
                                            const AtomicWriteOptions& write_options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("checkpoint: cannot create directory '", dir, "': ", ec.message()));
  auto bytes = serialize_checkpoint(model, optimizer, updater, state);
  if (!bytes.ok()) return bytes.status();
  const std::string path = (fs::path(dir) / checkpoint_file_name(state.step, state.run_id)).string();
  if (absl::Status st = write_file_atomically(path, *bytes, write_options); !st.ok()) return st;
  if (absl::Status st = prune_checkpoints(dir, state.run_id, keep_last); !st.ok()) return st;
  return path;
}

absl::StatusOr<CheckpointFile> read_checkpoint(const std::string& path) {
  auto raw = read_safetensors(path);
  if (!raw.ok()) return corrupt(path, str_cat("cannot be read: ", raw.status().message()));
  auto format = raw->metadata.find("trainer.format");
  if (format == raw->metadata.end()) {
    return corrupt(path, "no 'trainer.format' in the metadata (not a Coppice training checkpoint?)");
  }
  if (format->second == "coppice-checkpoint-1") {
    return corrupt(path, str_cat("was written by an older Coppice (format coppice-checkpoint-1), without checksums "
                                 "or a job fingerprint, so it cannot be verified; this version reads ",
                                 kCheckpointFormat));
  }
  if (format->second != kCheckpointFormat) {
    return corrupt(path, str_cat("unknown format '", format->second, "' (this version reads ", kCheckpointFormat, ")"));
  }
  if (absl::Status st = verify_checksums(*raw, path); !st.ok()) return st;
  // Written by no Coppice (saves refuse them), but a file can still say so:
  // a diverged state is no place to go on from.
  for (const auto& [name, t] : raw->tensors) {
    if (!all_finite(t)) {
      return corrupt(path,
                     str_cat("entry '", name, "' holds non-finite values (inf or NaN); no run resumes from them"));
    }
  }

  CheckpointFile out;
  out.path = path;
  if (absl::Status st = read_trainer_state(raw->metadata, path, out.state, out.has_updater); !st.ok()) return st;
  for (const auto& [k, v] : raw->metadata) {
    if (starts_with(k, kOptimPrefix)) out.optimizer.metadata[k.substr(sizeof(kOptimPrefix) - 1)] = v;
  }
  auto file = rebuild_sparse_tensors(std::move(*raw), path);
  if (!file.ok()) return corrupt(path, str_cat("cannot be read: ", file.status().message()));
  for (auto& [name, t] : file->tensors) {
    if (starts_with(name, kModelPrefix)) {
      out.model.emplace_back(name.substr(sizeof(kModelPrefix) - 1), std::move(t));
    } else if (starts_with(name, kOptimPrefix)) {
      if (!t.is_dense()) return corrupt(path, str_cat("optimizer state '", name, "' is not dense"));
      out.optimizer.tensors.emplace_back(name.substr(sizeof(kOptimPrefix) - 1), std::move(t));
    } else if (starts_with(name, kUpdaterPrefix)) {
      out.updater[name.substr(sizeof(kUpdaterPrefix) - 1)] = std::move(t);
    } else {
      return corrupt(path, str_cat("unexpected tensor '", name, "' (neither model., optim. nor updater.)"));
    }
  }
  if (!out.has_updater && !out.updater.empty()) {
    return corrupt(path, "holds updater.* entries but 'trainer.has_updater' is 0");
  }
  return out;
}

absl::Status apply_checkpoint(const CheckpointFile& file, Module& model, Optimizer& optimizer, MaskState* updater,
                              bool restore_hyperparameters) {
  const std::string& path = file.path;
  if (file.has_updater != (updater != nullptr)) {
    return misfit(path, file.has_updater ? "holds mask-updater state but the job has no mask updater (or SR-STE)"
                                         : "holds no mask-updater state but the job has a mask updater (or SR-STE)");
  }
  // Everything is checked before anything changes.
  name_parameters(model);
  std::map<std::string, Tensor> params_after, values_after;
  try {
    model.check_state_dict(file.model, /*strict=*/true);
    for (const auto& [name, p] : model.named_parameters()) {
      const Tensor* loaded = nullptr;
      for (const auto& [n, t] : file.model) {
        if (n == name) loaded = &t;
      }
      if (loaded == nullptr) continue;
      if (loaded->format() != p.value().format()) {
        return misfit(path, str_cat("parameter '", name, "' is ", loaded->format(), " in the checkpoint but ",
                                    p.value().format(), " in the model"));
      }
      if (loaded->dtype() != p.dtype()) {
        return misfit(path, str_cat("parameter '", name, "' is ", dtype_name(loaded->dtype()),
                                    " in the checkpoint but ", dtype_name(p.dtype()), " in the model"));
      }
      params_after[name] = *loaded;
      values_after[name] = values(*loaded);
    }
  } catch (const std::exception& e) { return misfit(path, str_cat("the model state does not fit: ", e.what())); }
  auto plan = plan_optimizer_state(optimizer, file.optimizer, path, &values_after);
  if (!plan.ok()) return misfit(path, std::string(plan.status().message()));
  if (updater != nullptr) {
    try {
      updater->check_state_tensors(file.updater, &params_after);
    } catch (const std::exception& e) { return misfit(path, str_cat("mask updater state: ", e.what())); }
  }

  try {
    const NamedParameters before = model.named_parameters();
    model.load_state_dict(file.model, /*strict=*/true);
    name_parameters(model);
    // Rebind the optimizer to parameters that load_state_dict replaced.
    const NamedParameters after = model.named_parameters();
    for (size_t i = 0; i < before.size(); ++i) {
      const Variable& old_p = before[i].second;
      const Variable& new_p = after[i].second;
      if (old_p.is_same(new_p)) continue;
      bool owned = false;
      for (const ParamGroup& g : optimizer.param_groups()) {
        for (const Variable& p : g.params) owned = owned || p.is_same(old_p);
      }
      if (!owned) continue;
      optimizer.reset_state(old_p);
      optimizer.replace_param(old_p, new_p, arange(values(new_p.value()).numel()));
    }
    if (absl::Status st = apply_optimizer_state(optimizer, std::move(*plan), restore_hyperparameters, path); !st.ok()) {
      return misfit(path, std::string(st.message()));
    }
    if (updater != nullptr) updater->load_state_tensors(file.updater);
  } catch (const std::exception& e) {
    // Only a resource failure (memory) gets here: everything else was checked.
    return misfit(path, str_cat("loading failed part-way (rebuild the components): ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainerState> load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer,
                                             MaskState* updater) {
  auto file = read_checkpoint(path);
  if (!file.ok()) return file.status();
  if (absl::Status st = apply_checkpoint(*file, model, optimizer, updater); !st.ok()) return st;
  return file->state;
}

}  // namespace coppice
