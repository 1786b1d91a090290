// The YAML section reader of the job loader (train/config.cc): a Section is
// one map of the job's tree, checked against the schema's keys and types on
// construction (train/config_schema.h), read with typed getters that check
// each number's range; bad() and missing() throw an Issue, which
// load_job_config turns into a Status naming the key. Internal to train/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensor/error.h"
#include "train/config_schema.h"
#include "train/error_quote.h"
#include "yaml-cpp/yaml.h"

namespace coppice::job_config {

// Thrown inside the loader and turned into a Status at its boundary.
struct Issue {
  absl::StatusCode code;
  std::string message;
};

template <typename... Parts>
[[noreturn]] void bad(const std::string& path, const Parts&... parts) {
  throw Issue{absl::StatusCode::kInvalidArgument, str_cat(path, ": ", parts...)};
}

template <typename... Parts>
[[noreturn]] void missing(const std::string& path, const Parts&... parts) {
  throw Issue{absl::StatusCode::kNotFound, str_cat(path, ": ", parts...)};
}

inline std::string join_key(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

// v as an ostream prints it by default (six significant digits), for messages.
std::string fmt(double v);
// The int64 a YAML integer scalar holds; one that does not fit (yaml-cpp
// refuses it) is refused as such, naming `where`.
int64_t scalar_integer(const YAML::Node& n, const std::string& where);
// A seed: an integer in [0, 2^64).
uint64_t scalar_seed(const YAML::Node& n, const std::string& where);
// Whether n holds an int64, into *out.
bool is_int(const YAML::Node& n, int64_t* out);

// One map of the tree: refuses unknown keys and values of the wrong type on
// construction, then reads typed values with defaults.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string pattern)
      : node_(node), path_(std::move(path)), pattern_(std::move(pattern)) {
    if (!node_.IsDefined() || node_.IsNull()) return;
    if (!node_.IsMap()) bad(shown(), "expected a section (a map of keys), got ", describe(node_));
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar()) bad(shown(), "a key is not a plain name");
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) bad(at(key), "given twice (YAML would keep only the first)");
      const SchemaKey* k = find_schema_key(join_key(pattern_, key));
      if (k == nullptr) throw Issue{absl::StatusCode::kInvalidArgument, unknown_key_message(path_, pattern_, key)};
      if (!value_fits(kv.second, k->type))
        bad(at(key), "expected ", key_type_name(k->type), ", got ", describe(kv.second));
    }
  }

  const std::string& path() const { return path_; }
  std::string shown() const { return path_.empty() ? std::string("the job") : path_; }
  std::string at(const std::string& key) const { return join_key(path_, key); }

  bool has(const std::string& key) const {
    if (!node_.IsMap()) return false;
    const YAML::Node v = node_[key];
    return v.IsDefined() && !v.IsNull();
  }
  YAML::Node get(const std::string& key) const { return node_[key]; }

  // Numbers are checked against their key's range (config_schema.h); a
  // fallback is the caller's and is not.
  int64_t integer(const std::string& key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const int64_t v = scalar_integer(get(key), at(key));
    check_range(key, v, [&] { return std::to_string(v); });
    return v;
  }
  // The key's range and a lower bound of the caller's (a contextual one).
  int64_t at_least(const std::string& key, int64_t fallback, int64_t low) const {
    const int64_t v = integer(key, fallback);
    if (v < low) bad(at(key), "must be >= ", low, ", got ", v);
    return v;
  }
  // Seeds: any unsigned 64-bit integer.
  uint64_t seed(const std::string& key, uint64_t fallback) const {
    return has(key) ? scalar_seed(get(key), at(key)) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const double v = get(key).as<double>();
    if (!std::isfinite(v)) bad(at(key), "must be a finite number, got ", shorten_for_error(get(key).Scalar()));
    check_range(key, v, [&] { return fmt(v); });
    return v;
  }
  bool boolean(const std::string& key, bool fallback) const { return has(key) ? get(key).as<bool>() : fallback; }
  std::string string(const std::string& key, const std::string& fallback) const {
    return has(key) ? get(key).Scalar() : fallback;
  }
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& options) const {
    std::string v = string(key, fallback);
    if (std::find(options.begin(), options.end(), v) != options.end()) return v;
    const std::string best = closest_match(v, options);
    bad(at(key), "must be one of ", str_join(options, " | "), ", got ", quote_for_error(v),
        best.empty() ? std::string() : str_cat("; did you mean '", best, "'?"));
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    const YAML::Node v = get(key);
    if (v.IsScalar()) return {v.Scalar()};
    for (const auto& e : v) out.push_back(e.Scalar());
    return out;
  }
  Section section(const std::string& key) const {
    return Section(has(key) ? get(key) : YAML::Node(), at(key), join_key(pattern_, key));
  }
  std::vector<Section> list(const std::string& key) const {
    std::vector<Section> out;
    if (!has(key)) return out;
    const YAML::Node v = get(key);
    for (size_t i = 0; i < v.size(); ++i)
      out.emplace_back(v[i], str_cat(at(key), "[", i, "]"), join_key(pattern_, key) + "[]");
    return out;
  }
  // A free-form map of scalars, in file order.
  std::vector<std::pair<std::string, YAML::Node>> entries(const std::string& key) const {
    std::vector<std::pair<std::string, YAML::Node>> out;
    if (!has(key)) return out;
    std::set<std::string> seen;
    for (const auto& kv : get(key)) {
      if (!seen.insert(kv.first.Scalar()).second)
        bad(join_key(at(key), kv.first.Scalar()), "given twice (YAML would keep only the first)");
      if (!kv.second.IsScalar() && !kv.second.IsSequence())
        bad(join_key(at(key), kv.first.Scalar()), "expected a scalar, got ", describe(kv.second));
      out.emplace_back(kv.first.Scalar(), kv.second);
    }
    return out;
  }
  // Refuses `keys` when present: they belong to another choice.
  void refuse(const std::vector<std::string>& keys, const std::string& why) const {
    for (const std::string& k : keys)
      if (has(k)) bad(at(k), why);
  }

  template <typename T, typename Shown>
  void check_range(const std::string& key, T v, const Shown& shown) const {
    const KeyRange* r = key_range(join_key(pattern_, key));
    if (r != nullptr && !r->contains(v)) bad(at(key), "must be ", r->text(), ", got ", shown());
  }

  static std::string describe(const YAML::Node& n) {
    if (n.IsMap()) return "a map";
    if (n.IsSequence()) return "a list";
    if (n.IsScalar()) return quote_for_error(n.Scalar());
    return "nothing";
  }

 private:
  YAML::Node node_;
  std::string path_;
  std::string pattern_;
};

}  // namespace coppice::job_config
