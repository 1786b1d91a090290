#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>

#include "optim/state_io.h"
#include "sparse/io/sparse_safetensors.h"
#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/io/safetensors.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

constexpr char kModelPrefix[] = "model.";
constexpr char kOptimPrefix[] = "optim.";
constexpr char kUpdaterPrefix[] = "updater.";
constexpr char kTrainerPrefix[] = "trainer.";
constexpr char kExtraPrefix[] = "trainer.extra.";
constexpr char kFilePrefix[] = "ckpt-";
constexpr char kFileSuffix[] = ".safetensors";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

absl::Status errno_error(const std::string& what, const std::string& path) {
  return absl::UnavailableError(str_cat("checkpoint: ", what, " '", path, "': ", std::strerror(errno)));
}

absl::Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return errno_error("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_error("cannot fsync directory", dir);
  return absl::OkStatus();
}

// The step of a checkpoint file name, or -1.
int64_t step_of(const std::string& file) {
  const std::string p = kFilePrefix, s = kFileSuffix;
  if (file.size() <= p.size() + s.size() || !starts_with(file, p) ||
      file.compare(file.size() - s.size(), s.size(), s) != 0) {
    return -1;
  }
  const std::string digits = file.substr(p.size(), file.size() - p.size() - s.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(digits);
}

bool parse_i64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
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

}  // namespace

void name_parameters(const Module& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.name() != name) p.set_name(name);
  }
}

absl::Status write_file_atomically(const std::string& path, const std::string& bytes,
                                   const AtomicWriteOptions& options) {
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string tmp =
      (fs::path(dir) / str_cat(".", target.filename().string(), ".tmp.", static_cast<int64_t>(::getpid()))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("cannot create", tmp);
  size_t to_write = bytes.size();
  const bool crash = options.simulate_crash_after_bytes >= 0;
  if (crash) to_write = std::min(to_write, static_cast<size_t>(options.simulate_crash_after_bytes));
  size_t done = 0;
  while (done < to_write) {
    const ssize_t n = ::write(fd, bytes.data() + done, to_write - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status st = errno_error("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (crash) {
    ::close(fd);
    return absl::AbortedError(str_cat("checkpoint: simulated crash after ", done, " bytes of '", tmp, "'"));
  }
  if (::fsync(fd) != 0) {
    const absl::Status st = errno_error("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::close(fd) != 0) {
    const absl::Status st = errno_error("cannot close", tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status st = errno_error(str_cat("cannot rename '", tmp, "' to"), path);
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_dir(dir);
}

std::string checkpoint_file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%010lld%s", kFilePrefix, static_cast<long long>(step), kFileSuffix);
  return buf;
}

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("checkpoint: cannot list '", dir, "': ", ec.message()));
  for (const fs::directory_entry& e : it) {
    if (!e.is_regular_file(ec)) continue;
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0) out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::string> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto list = list_checkpoints(path);
    if (!list.ok()) return list.status();
    if (list->empty()) return absl::NotFoundError(str_cat("checkpoint: no checkpoint (ckpt-*.safetensors) in '", path, "'"));
    return list->back().second;
  }
  if (!fs::exists(path, ec)) return absl::NotFoundError(str_cat("checkpoint: '", path, "' does not exist"));
  return path;
}

absl::StatusOr<std::string> serialize_checkpoint(const Module& model, const Optimizer& optimizer,
                                                 const MaskUpdater* updater, const TrainerState& state) {
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
  metadata["trainer.format"] = "coppice-checkpoint-1";
  metadata["trainer.step"] = std::to_string(state.step);
  metadata["trainer.epoch"] = std::to_string(state.epoch);
  metadata["trainer.batch"] = std::to_string(state.batch);
  metadata["trainer.rng_seed"] = std::to_string(state.rng_seed);
  metadata["trainer.rng_offset"] = std::to_string(state.rng_offset);
  metadata["trainer.lr_step"] = std::to_string(state.lr_step);
  metadata["trainer.data_seed"] = std::to_string(state.data_seed);
  metadata["trainer.has_updater"] = updater != nullptr ? "1" : "0";
  for (const auto& [k, v] : state.extra) metadata[kExtraPrefix + k] = v;
  return serialize_sparse_safetensors(tensors, metadata);
}

absl::StatusOr<std::string> save_checkpoint(const std::string& dir, const Module& model, const Optimizer& optimizer,
                                            const MaskUpdater* updater, const TrainerState& state, int64_t keep_last,
                                            const AtomicWriteOptions& write_options) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("checkpoint: cannot create directory '", dir, "': ", ec.message()));
  auto bytes = serialize_checkpoint(model, optimizer, updater, state);
  if (!bytes.ok()) return bytes.status();
  const std::string path = (fs::path(dir) / checkpoint_file_name(state.step)).string();
  if (absl::Status st = write_file_atomically(path, *bytes, write_options); !st.ok()) return st;

  // Temporary files of interrupted writers (this process's included: its
  // write just succeeded, so none of its own is in flight).
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (starts_with(f, std::string(".") + kFilePrefix) && f.find(".tmp.") != std::string::npos) {
      fs::remove(e.path(), ec);
    }
  }
  if (keep_last > 0) {
    auto list = list_checkpoints(dir);
    if (!list.ok()) return list.status();
    const int64_t excess = static_cast<int64_t>(list->size()) - keep_last;
    for (int64_t i = 0; i < excess; ++i) {
      if ((*list)[static_cast<size_t>(i)].second == path) continue;
      fs::remove((*list)[static_cast<size_t>(i)].second, ec);
    }
  }
  return path;
}

absl::StatusOr<TrainerState> load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer,
                                             MaskUpdater* updater) {
  auto file = read_sparse_safetensors(path);
  if (!file.ok()) {
    return absl::DataLossError(str_cat("checkpoint '", path, "' cannot be read: ", file.status().message()));
  }
  const auto& meta = file->metadata;
  auto get = [&](const std::string& key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  if (get("trainer.format") == nullptr) {
    return corrupt(path, "no 'trainer.format' in the metadata (not a Coppice training checkpoint?)");
  }
  TrainerState state;
  for (const auto& [key, out] : std::vector<std::pair<std::string, int64_t*>>{
           {"trainer.step", &state.step}, {"trainer.epoch", &state.epoch}, {"trainer.batch", &state.batch},
           {"trainer.lr_step", &state.lr_step}}) {
    const std::string* v = get(key);
    if (v == nullptr || !parse_i64(*v, out)) return corrupt(path, str_cat("metadata '", key, "' is missing or not an integer"));
  }
  for (const auto& [key, out] : std::vector<std::pair<std::string, uint64_t*>>{
           {"trainer.rng_seed", &state.rng_seed}, {"trainer.rng_offset", &state.rng_offset},
           {"trainer.data_seed", &state.data_seed}}) {
    const std::string* v = get(key);
    if (v == nullptr || !parse_u64(*v, out)) return corrupt(path, str_cat("metadata '", key, "' is missing or not an integer"));
  }
  for (const auto& [k, v] : meta) {
    if (starts_with(k, kExtraPrefix)) state.extra[k.substr(sizeof(kExtraPrefix) - 1)] = v;
  }
  const std::string* has_updater = get("trainer.has_updater");
  const bool saved_updater = has_updater != nullptr && *has_updater == "1";
  if (saved_updater != (updater != nullptr)) {
    return absl::FailedPreconditionError(
        str_cat("checkpoint '", path, "': ", saved_updater ? "holds mask-updater state but no updater was given"
                                                           : "holds no mask-updater state but an updater was given"));
  }

  NamedTensors model_state;
  NamedTensors optim_tensors;
  std::map<std::string, std::string> optim_meta;
  std::map<std::string, Tensor> updater_state;
  for (const auto& [name, t] : file->tensors) {
    if (starts_with(name, kModelPrefix)) {
      model_state.emplace_back(name.substr(sizeof(kModelPrefix) - 1), t);
    } else if (starts_with(name, kOptimPrefix)) {
      optim_tensors.emplace_back(name.substr(sizeof(kOptimPrefix) - 1), t);
    } else if (starts_with(name, kUpdaterPrefix)) {
      updater_state[name.substr(sizeof(kUpdaterPrefix) - 1)] = t;
    } else {
      return corrupt(path, str_cat("unexpected tensor '", name, "' (neither model., optim. nor updater.)"));
    }
  }
  for (const auto& [k, v] : meta) {
    if (starts_with(k, kOptimPrefix)) optim_meta[k.substr(sizeof(kOptimPrefix) - 1)] = v;
  }
  auto optim_bytes = serialize_safetensors(optim_tensors, optim_meta);
  if (!optim_bytes.ok()) return corrupt(path, str_cat("optimizer state: ", optim_bytes.status().message()));

  try {
    name_parameters(model);
    const NamedParameters before = model.named_parameters();
    model.load_state_dict(model_state, /*strict=*/true);
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
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(str_cat("checkpoint '", path, "': the model state does not fit: ", e.what()));
  }
  if (absl::Status st = parse_optimizer_state(optimizer, *optim_bytes, path); !st.ok()) {
    return absl::FailedPreconditionError(str_cat("checkpoint '", path, "': ", st.message()));
  }
  if (updater != nullptr) {
    try {
      updater->load_state_tensors(updater_state);
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(str_cat("checkpoint '", path, "': mask updater state: ", e.what()));
    }
  }
  return state;
}

}  // namespace coppice
