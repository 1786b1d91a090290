#include "train/checkpoint_files.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "tensor/error.h"
#include "tensor/io/input_file.h"
#include "tensor/io/json.h"

namespace coppice {
namespace {

namespace fs = std::filesystem;

constexpr char kFilePrefix[] = "ckpt-";
constexpr char kFileSuffix[] = ".safetensors";
constexpr size_t kRunIdLength = 16;
constexpr size_t kMarkerMaxBytes = 1 << 16;

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The step and run id of a checkpoint file name; false for other names.
bool parse_name(const std::string& file, int64_t* step, std::string* run_id) {
  if (!starts_with(file, kFilePrefix) || !ends_with(file, kFileSuffix)) return false;
  const size_t p = sizeof(kFilePrefix) - 1, s = sizeof(kFileSuffix) - 1;
  if (file.size() <= p + s) return false;
  const std::string body = file.substr(p, file.size() - p - s);
  const size_t dash = body.find('-');
  const std::string digits = body.substr(0, dash);
  const std::string id = dash == std::string::npos ? std::string() : body.substr(dash + 1);
  if (!all_digits(digits) || digits.size() > 18) return false;
  if (dash != std::string::npos && !is_run_id(id)) return false;
  *step = std::stoll(digits);
  *run_id = id;
  return true;
}

bool is_temporary(const std::string& file) {
  return starts_with(file, std::string(".") + kFilePrefix) && file.find(".tmp.") != std::string::npos;
}

// A temporary file (write_file_atomically names it ".<name>.tmp.<pid>") may
// be removed by the process that made it, or once that process is provably
// gone: another run may be writing it right now.
bool owner_gone_or_self(const std::string& file) {
  const size_t at = file.rfind(".tmp.");
  const std::string digits = file.substr(at + 5);
  if (!all_digits(digits) || digits.size() > 9) return false;  // not ours to judge
  const pid_t pid = static_cast<pid_t>(std::stol(digits));
  if (pid == ::getpid()) return true;
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

std::string run_label(const std::string& run_id) { return run_id.empty() ? "(no run id)" : run_id; }

// "3 checkpoints of run X (steps 100..300)" for each run in `entries` but `skip`.
std::vector<std::string> describe_runs(const std::vector<CheckpointEntry>& entries, const std::string* skip) {
  std::map<std::string, std::vector<int64_t>> steps;
  for (const CheckpointEntry& e : entries) {
    if (skip == nullptr || e.run_id != *skip) steps[e.run_id].push_back(e.step);
  }
  std::vector<std::string> out;
  for (const auto& [id, s] : steps) {
    out.push_back(str_cat(s.size(), " checkpoint", s.size() == 1 ? "" : "s", " of run ", run_label(id), " (step",
                          s.size() == 1 ? str_cat(" ", s.front()) : str_cat("s ", s.front(), "..", s.back()), ")"));
  }
  return out;
}

const CheckpointEntry* newest_of(const std::vector<CheckpointEntry>& entries, const std::string& run_id) {
  const CheckpointEntry* best = nullptr;
  for (const CheckpointEntry& e : entries) {
    if (e.run_id == run_id && (best == nullptr || e.step > best->step)) best = &e;
  }
  return best;
}

}  // namespace

std::string new_run_id() {
  std::random_device rd;  // /dev/urandom: ids of runs started at once still differ
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[kRunIdLength + 1];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool is_run_id(const std::string& id) {
  return id.size() == kRunIdLength &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string checkpoint_file_name(int64_t step, const std::string& run_id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%010lld", kFilePrefix, static_cast<long long>(step));
  return run_id.empty() ? str_cat(buf, kFileSuffix) : str_cat(buf, "-", run_id, kFileSuffix);
}

absl::StatusOr<std::vector<CheckpointEntry>> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("checkpoint: cannot list '", dir, "': ", ec.message()));
  for (const fs::directory_entry& e : it) {
    if (!e.is_regular_file(ec)) continue;
    CheckpointEntry c;
    if (parse_name(e.path().filename().string(), &c.step, &c.run_id)) {
      c.path = e.path().string();
      out.push_back(std::move(c));
    }
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return a.step != b.step ? a.step < b.step : a.run_id < b.run_id;
  });
  return out;
}

absl::Status write_run_marker(const std::string& dir, const RunMarker& marker) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(str_cat("checkpoint: cannot create directory '", dir, "': ", ec.message()));
  const std::string text =
      str_cat("{\"run_id\": ", json::quote(marker.run_id), ", \"resumed_from\": ", json::quote(marker.resumed_from),
              ", \"started\": ", marker.started, "}\n");
  return write_file_atomically((fs::path(dir) / kRunMarkerName).string(), text);
}

absl::StatusOr<std::optional<RunMarker>> read_run_marker(const std::string& dir) {
  const std::string path = (fs::path(dir) / kRunMarkerName).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<RunMarker>();
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(str_cat("checkpoint: run marker '", path, "' ", what,
                                       " (delete it to choose by file names alone, or resume from a file)"));
  };
  // Opened without blocking and refused unless a regular file (a FIFO in its
  // place never stalls the resume), read no further than the limit.
  const absl::StatusOr<std::string> text = read_file_bytes(path, kMarkerMaxBytes);
  if (!text.ok()) {
    const std::string why(text.status().message());  // "<path>: is a FIFO, not a regular file"
    return bad(why.rfind(path + ": ", 0) == 0 ? why.substr(path.size() + 2) : why);
  }
  auto root = json::parse(*text);
  if (!root.ok()) return bad(str_cat("is not valid JSON: ", root.status().message()));
  const json::Value* id = root->find("run_id");
  const json::Value* from = root->find("resumed_from");
  const json::Value* started = root->find("started");
  if (!root->is_object() || id == nullptr || !id->is_string() || !is_run_id(id->as_string()) || from == nullptr ||
      !from->is_string() || started == nullptr || !started->is_integer()) {
    return bad("does not hold a run_id (16 hex digits), resumed_from and started");
  }
  return std::optional<RunMarker>(RunMarker{id->as_string(), from->as_string(), started->as_integer()});
}

absl::StatusOr<ResolvedCheckpoint> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return absl::NotFoundError(str_cat("checkpoint: '", path, "' does not exist"));
    return ResolvedCheckpoint{path, ""};
  }
  auto list = list_checkpoints(path);
  if (!list.ok()) return list.status();
  auto marker = read_run_marker(path);
  if (!marker.ok()) return marker.status();
  if (marker->has_value()) {
    const RunMarker& m = **marker;
    if (const CheckpointEntry* e = newest_of(*list, m.run_id)) {
      return ResolvedCheckpoint{e->path, str_cat("the newest checkpoint (step ", e->step, ") of run ", m.run_id,
                                                 ", the last run to start in '", path, "'")};
    }
    if (!m.resumed_from.empty() && fs::is_regular_file(m.resumed_from, ec)) {
      return ResolvedCheckpoint{m.resumed_from, str_cat("run ", m.run_id, ", the last to start in '", path,
                                                        "', wrote no checkpoint; it had resumed from this one")};
    }
    const std::vector<std::string> others = describe_runs(*list, nullptr);
    return absl::NotFoundError(str_cat(
        "checkpoint: run ", m.run_id, ", the last to start in '", path, "', wrote no checkpoint",
        m.resumed_from.empty() ? std::string(" (it started fresh)")
                               : str_cat(" and the checkpoint it resumed from, '", m.resumed_from, "', is gone"),
        others.empty() ? std::string("; the directory holds no other checkpoint")
                       : str_cat("; not taking another run's checkpoint silently: the directory holds ",
                                 str_join(others, ", "), "; resume from one of those files to take it on purpose")));
  }
  if (list->empty())
    return absl::NotFoundError(str_cat("checkpoint: no checkpoint (ckpt-*.safetensors) in '", path, "'"));
  const std::vector<std::string> runs = describe_runs(*list, nullptr);
  if (runs.size() > 1) {
    return absl::FailedPreconditionError(
        str_cat("checkpoint: '", path, "' has no run marker (", kRunMarkerName, ") and holds checkpoints of ",
                runs.size(), " runs: ", str_join(runs, ", "), "; resume from a file to choose one"));
  }
  const CheckpointEntry& e = list->back();
  return ResolvedCheckpoint{e.path, str_cat("the newest checkpoint (step ", e.step, ") of the only run in '", path,
                                            "' (the directory has no run marker)")};
}

bool is_newest_of_its_run(const std::string& path, const std::string& run_id) {
  const fs::path p(path);
  auto list = list_checkpoints(p.has_parent_path() ? p.parent_path().string() : std::string("."));
  if (!list.ok()) return false;
  const CheckpointEntry* newest = newest_of(*list, run_id);
  std::error_code ec;
  return newest != nullptr && fs::equivalent(newest->path, path, ec);
}

absl::Status prune_checkpoints(const std::string& dir, const std::string& run_id, int64_t keep_last) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_temporary(name) && owner_gone_or_self(name)) fs::remove(e.path(), ec);
  }
  if (keep_last <= 0) return absl::OkStatus();
  auto list = list_checkpoints(dir);
  if (!list.ok()) return list.status();
  std::vector<const CheckpointEntry*> own;
  for (const CheckpointEntry& e : *list) {
    if (e.run_id == run_id) own.push_back(&e);
  }
  const int64_t excess = static_cast<int64_t>(own.size()) - keep_last;
  for (int64_t i = 0; i < excess; ++i) fs::remove(own[static_cast<size_t>(i)]->path, ec);
  return absl::OkStatus();
}

absl::Status check_checkpoint_name(const std::string& path, int64_t step, const std::string& run_id) {
  int64_t named_step = 0;
  std::string named_run;
  if (!parse_name(fs::path(path).filename().string(), &named_step, &named_run)) return absl::OkStatus();
  const bool run_differs = !named_run.empty() && named_run != run_id;
  if (named_step == step && !run_differs) return absl::OkStatus();
  return absl::FailedPreconditionError(str_cat(
      "checkpoint '", path, "' is named for step ", named_step, named_run.empty() ? "" : str_cat(" of run ", named_run),
      " but holds step ", step, run_id.empty() ? "" : str_cat(" of run ", run_id),
      " (renamed or copied over?); a checkpoint's name must match its contents: rename it to '",
      checkpoint_file_name(step, run_id), "' to resume from it, or remove it"));
}

std::string other_runs_note(const std::string& dir, const std::string& run_id) {
  auto list = list_checkpoints(dir);
  if (!list.ok()) return "";
  return str_join(describe_runs(*list, &run_id), ", ");
}

}  // namespace coppice
