#include "train/config_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>

#include "tensor/error.h"
#include "train/error_quote.h"
#include "train/yaml_limits.h"
#include "yaml-cpp/yaml.h"

namespace coppice {

namespace {

using K = KeyType;

std::string parent_of(const std::string& pattern) {
  // The parent section pattern: strip the last ".name", or "[]" / ".*".
  if (pattern.size() >= 2 && pattern.compare(pattern.size() - 2, 2, "[]") == 0)
    return pattern.substr(0, pattern.size() - 2);
  const size_t dot = pattern.rfind('.');
  return dot == std::string::npos ? std::string() : pattern.substr(0, dot);
}

std::string last_name(const std::string& pattern) {
  const size_t dot = pattern.rfind('.');
  return dot == std::string::npos ? pattern : pattern.substr(dot + 1);
}

std::string join_key(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Step {
  std::string key;     // map key, or
  int64_t index = -1;  // list index
};

// Sets `value` at steps[i..] under `node`; `pattern` and `shown` describe node.
void set_at(YAML::Node node, const std::vector<Step>& steps, size_t i, const YAML::Node& value) {
  const Step& s = steps[i];
  const bool last = i + 1 == steps.size();
  if (s.index >= 0) {
    if (last) {
      node[static_cast<size_t>(s.index)] = value;
    } else {
      set_at(node[static_cast<size_t>(s.index)], steps, i + 1, value);
    }
    return;
  }
  if (last) {
    node[s.key] = value;
  } else {
    set_at(node[s.key], steps, i + 1, value);
  }
}

}  // namespace

const KeyRange* key_range(const std::string& pattern) {
  const SchemaKey* key = find_schema_key(pattern);
  return key != nullptr && key->range ? &*key->range : nullptr;
}

const SchemaKey* find_schema_key(const std::string& pattern) {
  static const std::map<std::string, const SchemaKey*> index = [] {
    std::map<std::string, const SchemaKey*> m;
    for (const SchemaKey& k : job_schema()) m[k.path] = &k;
    return m;
  }();
  auto it = index.find(pattern);
  return it == index.end() ? nullptr : it->second;
}

std::vector<std::string> schema_children(const std::string& pattern) {
  std::vector<std::string> out;
  for (const SchemaKey& k : job_schema()) {
    if (k.path.empty() || k.path.back() == ']' || k.path.back() == '*') continue;
    if (parent_of(k.path) == pattern) out.push_back(last_name(k.path));
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2 = prev;
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = normalized(word);
  for (const std::string& c : candidates)
    if (normalized(c) == w) return c;
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(w, normalized(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const size_t limit = std::max<size_t>(1, w.size() / 3);
  if (!best.empty() && best_d <= limit) return best;
  // A candidate that contains the word, or the word that contains it
  // ("rate" for "lr" is too far; "warmup" for "warmup_steps" is not).
  if (w.size() >= 3) {
    for (const std::string& c : candidates) {
      const std::string n = normalized(c);
      if (n.find(w) != std::string::npos || (n.size() >= 3 && w.find(n) != std::string::npos)) return c;
    }
  }
  return "";
}

std::string unknown_key_message(const std::string& path, const std::string& pattern, const std::string& key) {
  const std::string shown = join_key(path, shorten_for_error(key));
  const std::vector<std::string> here = schema_children(pattern);
  const std::string best = closest_match(key, here);
  if (!best.empty()) return str_cat(shown, ": unknown key; did you mean '", join_key(path, best), "'?");
  // The same name in another section ("lr" at the top: optimizer.lr).
  for (const SchemaKey& k : job_schema()) {
    if (k.path.empty() || k.path.back() == ']' || k.path.back() == '*') continue;
    if (last_name(k.path) == key && parent_of(k.path) != pattern)
      return str_cat(shown, ": unknown key; did you mean '", k.path, "' (in another section)?");
  }
  return str_cat(shown, ": unknown key; known keys here: ", str_join(here, ", "));
}

absl::Status apply_override(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return absl::InvalidArgumentError(str_cat("--set ", shorten_for_error(assignment), ": expected key.path=value"));
  const std::string key_path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const std::string where = str_cat("--set ", shorten_for_error(key_path));

  // Split on '.', turning "rules[0]" into "rules", "0".
  std::vector<std::string> parts;
  {
    std::string cur;
    for (size_t i = 0; i < key_path.size(); ++i) {
      const char c = key_path[i];
      if (c == '.' || c == '[' || c == ']') {
        if (!cur.empty()) parts.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) parts.push_back(cur);
  }
  if (parts.empty()) return absl::InvalidArgumentError(str_cat(where, ": empty key path"));

  // Resolve against the schema, following the tree as it is for list sizes.
  std::vector<Step> steps;
  std::string pattern;  // schema pattern of the current node
  std::string shown;    // the path as messages show it
  YAML::Node cur = YAML::Clone(root);
  const SchemaKey* key = find_schema_key("");
  // Steps into the map key `part`, whose schema pattern is `next_pattern`.
  const auto enter = [&](const std::string& part, const std::string& next_pattern, const SchemaKey* next) {
    steps.push_back({part, -1});
    pattern = next_pattern;
    shown = join_key(shown, part);
    key = next;
    if (cur.IsMap() && cur[part]) {
      YAML::Node child = cur[part];
      cur.reset(child);
    } else {
      cur.reset(YAML::Node());
    }
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (key->type == K::kList) {
      int64_t index = -1;
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      });
      if (digits && part.size() < 10) index = std::stoll(part);
      const int64_t size = cur.IsSequence() ? static_cast<int64_t>(cur.size()) : 0;
      if (index < 0)
        return absl::InvalidArgumentError(
            str_cat(where, ": ", shown, " is a list; expected an index, got ", quote_for_error(part)));
      if (index >= size)
        return absl::InvalidArgumentError(str_cat(where, ": ", shown, " has ", size, size == 1 ? " entry" : " entries",
                                                  "; index ", index, " is out of range"));
      steps.push_back({"", index});
      pattern += "[]";
      shown = str_cat(shown, "[", index, "]");
      key = find_schema_key(pattern);
      YAML::Node next = cur[static_cast<size_t>(index)];
      cur.reset(next);
      continue;
    }
    if (key->type == K::kFreeMap) {
      const SchemaKey* each = find_schema_key(pattern + ".*");
      if (each != nullptr && each->type == K::kSection) {
        // A map of named sections (sparsity.formats): the part is a name.
        enter(part, pattern + ".*", each);
        continue;
      }
      // The rest of the path is one key: parameter names have dots.
      std::string rest = part;
      for (size_t j = i + 1; j < parts.size(); ++j) rest += "." + parts[j];
      steps.push_back({rest, -1});
      pattern += ".*";
      shown = join_key(shown, rest);
      key = find_schema_key(pattern);
      break;
    }
    if (key->type != K::kSection)
      return absl::InvalidArgumentError(
          str_cat(where, ": ", shown, " is ", key_type_name(key->type), ", not a section"));
    const std::string next_pattern = join_key(pattern, part);
    const SchemaKey* next = find_schema_key(next_pattern);
    if (next == nullptr || part.find('*') != std::string::npos)
      return absl::InvalidArgumentError(str_cat("--set: ", unknown_key_message(shown, pattern, part)));
    enter(part, next_pattern, next);
  }

  // The value sits under the root map and one collection per step.
  const int value_depth = static_cast<int>(steps.size());
  if (absl::Status s = check_yaml_text(text, where, "the value", value_depth); !s.ok()) return s;
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        str_cat(where, ": the value ", quote_for_error(text), " is not valid YAML (", e.msg, ")"));
  }
  if (absl::Status s = check_yaml_tree(value, where, value_depth); !s.ok()) return s;
  if (!value_fits(value, key->type))
    return absl::InvalidArgumentError(
        str_cat(where, ": ", shown, " expects ", key_type_name(key->type), ", got ", quote_for_error(text)));
  try {
    if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) return absl::InvalidArgumentError(str_cat(where, ": the job file is not a map of keys"));
    set_at(root, steps, 0, value);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(str_cat(where, ": cannot set it in this file (", e.msg, ")"));
  }
  return absl::OkStatus();
}

}  // namespace coppice
