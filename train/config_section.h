// The YAML section reader of the job loader (train/config.cc): a Section is
// one map of the job's tree, checked against the schema's keys and types on
// construction (train/config_schema.h), read with typed getters that take
// each key's range, choices and default from its declaration
// (train/job_keys.cc); bad() and missing() throw an Issue, which
// load_job_config turns into a Status naming the key. Internal to train/.
#pragma once

#include <cstdint>
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
// construction, then reads each key as its declaration (train/job_keys.cc)
// says: a number within its range, a string among its choices, and, when the
// job leaves the key out, its declared default. A key whose default is
// computed from other keys is read with the computed value as `fallback`;
// the other getters take none, so no default is spelled twice. A getter
// that does not fit the key's declaration (an undeclared key, a fallback for
// a key that declares its default, a default for a key that has none) is a
// bug of the reader and throws an Issue with code kInternal.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string pattern);

  const std::string& path() const { return path_; }
  std::string shown() const { return path_.empty() ? std::string("the job") : path_; }
  std::string at(const std::string& key) const { return join_key(path_, key); }

  bool has(const std::string& key) const {
    if (!node_.IsMap()) return false;
    const YAML::Node v = node_[key];
    return v.IsDefined() && !v.IsNull();
  }
  YAML::Node get(const std::string& key) const { return node_[key]; }

  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  // Seeds: any unsigned 64-bit integer.
  uint64_t seed(const std::string& key) const;
  uint64_t seed(const std::string& key, uint64_t fallback) const;
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  // A string among the key's declared choices (a did-you-mean for a near miss).
  std::string choice(const std::string& key) const;
  std::string choice(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> strings(const std::string& key) const;
  // Each within the key's range; empty when the key is left out.
  std::vector<int64_t> integers(const std::string& key) const;
  Section section(const std::string& key) const;
  std::vector<Section> list(const std::string& key) const;
  // A free-form map of scalars, in file order.
  std::vector<std::pair<std::string, YAML::Node>> entries(const std::string& key) const;
  // A free-form map of sections (key + ".*" is declared a section), by name
  // in file order.
  std::vector<std::pair<std::string, Section>> named_sections(const std::string& key) const;
  // Refuses `keys` when present: they belong to another choice.
  void refuse(const std::vector<std::string>& keys, const std::string& why) const;

  static std::string describe(const YAML::Node& n);

 private:
  // The declaration of `key` here, noted in the open KeyReadLog; an Issue
  // (kInternal) naming the pattern when there is none or it is not `type`.
  const SchemaKey& declared(const std::string& key, KeyType type) const;
  // The declared default of `key`, which must be a fixed value.
  const KeyDefault& fixed_default(const SchemaKey& k, const std::string& key) const;
  // Refuses a fallback for a key that does not declare its default computed.
  void check_computed(const SchemaKey& k, const std::string& key) const;
  template <typename T, typename Shown>
  void check_range(const SchemaKey& k, const std::string& key, T v, const Shown& shown) const {
    if (k.range && !k.range->contains(v)) bad(at(key), "must be ", k.range->text(), ", got ", shown());
  }
  int64_t present_integer(const SchemaKey& k, const std::string& key) const;
  double present_number(const SchemaKey& k, const std::string& key) const;
  std::string checked_choice(const SchemaKey& k, const std::string& key, const std::string& v) const;
  [[noreturn]] void reader_bug(const std::string& key, const std::string& what) const;

  YAML::Node node_;
  std::string path_;
  std::string pattern_;
};

}  // namespace coppice::job_config
