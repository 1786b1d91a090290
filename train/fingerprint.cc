#include "train/fingerprint.h"

#include <algorithm>

#include "tensor/error.h"

namespace coppice {

bool is_structural_key(const std::string& key) {
  auto under = [&](const char* prefix) { return key.rfind(prefix, 0) == 0; };
  return under("model.") || under("sparsity.") || key == "precision.dtype" || key == "optimizer.name" ||
         key == "mask_update.method";
}

std::vector<FingerprintChange> fingerprint_changes(const Fingerprint& saved, const Fingerprint& current) {
  static const std::string kNone = "(none)";
  std::vector<FingerprintChange> out;
  auto s = saved.begin();
  auto c = current.begin();
  while (s != saved.end() || c != current.end()) {
    if (c == current.end() || (s != saved.end() && s->first < c->first)) {
      out.push_back({s->first, s->second, kNone});
      ++s;
    } else if (s == saved.end() || c->first < s->first) {
      out.push_back({c->first, kNone, c->second});
      ++c;
    } else {
      if (s->second != c->second) out.push_back({s->first, s->second, c->second});
      ++s;
      ++c;
    }
  }
  return out;
}

bool change_allowed(const std::string& key, const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed) {
    if (a == key || a == "*") return true;
    if (a.size() >= 2 && a.compare(a.size() - 2, 2, ".*") == 0 && key.size() > a.size() - 1 &&
        key.compare(0, a.size() - 1, a, 0, a.size() - 1) == 0) {
      return true;
    }
  }
  return false;
}

std::string describe_changes(const std::vector<FingerprintChange>& changes) {
  std::vector<std::string> parts;
  for (const FingerprintChange& c : changes) parts.push_back(str_cat(c.key, ": ", c.saved, " -> ", c.current));
  return str_join(parts, "; ");
}

absl::Status check_allowed_changes(const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed) {
    if (a == "*") continue;
    const std::string key = a.size() >= 2 && a.compare(a.size() - 2, 2, ".*") == 0 ? a.substr(0, a.size() - 2) : a;
    const bool chars_ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '[' || c == ']';
    });
    if (!chars_ok || key.front() == '.' || key.back() == '.') {
      return absl::InvalidArgumentError(
          str_cat("'", a, "' is not a job setting (a key such as optimizer.lr, a prefix such as optimizer.*, or *)"));
    }
    if (is_structural_key(key + (key == a ? "" : "."))) {
      return absl::InvalidArgumentError(
          str_cat("'", a,
                  "' cannot change on resume: the model, its formats and densities, the dtype, the optimizer "
                  "and the mask-update method shape the checkpoint's tensors (start a new run instead)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace coppice
