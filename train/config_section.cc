#include "train/config_section.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "train/key_read_log.h"

namespace coppice::job_config {

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

int64_t scalar_integer(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {}
  if (is_integer_literal(n.Scalar()))
    bad(where, shorten_for_error(n.Scalar()), " does not fit in a 64-bit integer (",
        std::numeric_limits<int64_t>::min(), " to ", std::numeric_limits<int64_t>::max(), ")");
  bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
}

uint64_t scalar_seed(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<uint64_t>();  // refuses a sign
  } catch (const YAML::Exception&) {}
  if (!is_integer_literal(n.Scalar())) bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
  bad(where, "must be ", any_seed().text(), ", got ", shorten_for_error(n.Scalar()),
      n.Scalar()[0] == '-' ? "" : " (it does not fit in 64 bits)");
}

bool is_int(const YAML::Node& n, int64_t* out) {
  try {
    *out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

Section::Section(const YAML::Node& node, std::string path, std::string pattern)
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
    if (value_fits(kv.second, k->type)) continue;
    if (k->type == KeyType::kIntList && kv.second.IsSequence()) {
      for (size_t i = 0; i < kv.second.size(); ++i)
        if (!value_fits(kv.second[i], KeyType::kInt))
          bad(str_cat(at(key), "[", i, "]"), "expected an integer, got ", describe(kv.second[i]));
    }
    bad(at(key), "expected ", key_type_name(k->type), ", got ", describe(kv.second));
  }
}

void Section::reader_bug(const std::string& key, const std::string& what) const {
  throw Issue{absl::StatusCode::kInternal,
              str_cat("job loader: ", join_key(pattern_, key), ": ", what, " (train/job_keys.cc declares the keys)")};
}

const SchemaKey& Section::declared(const std::string& key, KeyType type) const {
  const std::string pattern = join_key(pattern_, key);
  KeyReadLog::note(pattern);
  const SchemaKey* k = find_schema_key(pattern);
  if (k == nullptr) reader_bug(key, "read but not declared");
  if (k->type != type) reader_bug(key, str_cat("read as ", key_type_name(type), ", declared ", key_type_name(k->type)));
  return *k;
}

const KeyDefault& Section::fixed_default(const SchemaKey& k, const std::string& key) const {
  if (k.default_value.kind != KeyDefault::Kind::kValue)
    reader_bug(key,
               "left out, and its declaration gives no default value; the reader must check has() or pass the "
               "computed default");
  return k.default_value;
}

void Section::check_computed(const SchemaKey& k, const std::string& key) const {
  if (k.default_value.kind == KeyDefault::Kind::kValue)
    reader_bug(key, "read with a fallback, but its declaration gives the default; read it without one");
}

int64_t Section::present_integer(const SchemaKey& k, const std::string& key) const {
  const int64_t v = scalar_integer(get(key), at(key));
  check_range(k, key, v, [&] { return std::to_string(v); });
  return v;
}

double Section::present_number(const SchemaKey& k, const std::string& key) const {
  const double v = get(key).as<double>();
  if (!std::isfinite(v)) bad(at(key), "must be a finite number, got ", shorten_for_error(get(key).Scalar()));
  check_range(k, key, v, [&] { return fmt(v); });
  return v;
}

int64_t Section::integer(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kInt);
  return has(key) ? present_integer(k, key) : std::get<int64_t>(fixed_default(k, key).value);
}

int64_t Section::integer(const std::string& key, int64_t fallback) const {
  const SchemaKey& k = declared(key, KeyType::kInt);
  check_computed(k, key);
  return has(key) ? present_integer(k, key) : fallback;
}

uint64_t Section::seed(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kInt);
  return has(key) ? scalar_seed(get(key), at(key))
                  : static_cast<uint64_t>(std::get<int64_t>(fixed_default(k, key).value));
}

uint64_t Section::seed(const std::string& key, uint64_t fallback) const {
  check_computed(declared(key, KeyType::kInt), key);
  return has(key) ? scalar_seed(get(key), at(key)) : fallback;
}

double Section::number(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kDouble);
  return has(key) ? present_number(k, key) : std::get<double>(fixed_default(k, key).value);
}

double Section::number(const std::string& key, double fallback) const {
  const SchemaKey& k = declared(key, KeyType::kDouble);
  check_computed(k, key);
  return has(key) ? present_number(k, key) : fallback;
}

bool Section::boolean(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kBool);
  return has(key) ? get(key).as<bool>() : std::get<bool>(fixed_default(k, key).value);
}

std::string Section::string(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kString);
  return has(key) ? get(key).Scalar() : std::get<std::string>(fixed_default(k, key).value);
}

std::string Section::string(const std::string& key, const std::string& fallback) const {
  check_computed(declared(key, KeyType::kString), key);
  return has(key) ? get(key).Scalar() : fallback;
}

std::string Section::checked_choice(const SchemaKey& k, const std::string& key, const std::string& v) const {
  if (k.choices.empty()) reader_bug(key, "read as a choice, but its declaration lists no choices");
  const std::vector<std::string> options = k.choices.list();
  if (std::find(options.begin(), options.end(), v) != options.end()) return v;
  const std::string best = closest_match(v, options);
  bad(at(key), "must be one of ", str_join(options, " | "), ", got ", quote_for_error(v),
      best.empty() ? std::string() : str_cat("; did you mean '", best, "'?"));
}

std::string Section::choice(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kString);
  return checked_choice(k, key, has(key) ? get(key).Scalar() : std::get<std::string>(fixed_default(k, key).value));
}

std::string Section::choice(const std::string& key, const std::string& fallback) const {
  const SchemaKey& k = declared(key, KeyType::kString);
  check_computed(k, key);
  return checked_choice(k, key, has(key) ? get(key).Scalar() : fallback);
}

std::vector<std::string> Section::strings(const std::string& key) const {
  declared(key, KeyType::kStringList);
  std::vector<std::string> out;
  if (!has(key)) return out;
  const YAML::Node v = get(key);
  if (v.IsScalar()) return {v.Scalar()};
  for (const auto& e : v) out.push_back(e.Scalar());
  return out;
}

std::vector<int64_t> Section::integers(const std::string& key) const {
  const SchemaKey& k = declared(key, KeyType::kIntList);
  std::vector<int64_t> out;
  if (!has(key)) return out;
  const YAML::Node v = get(key);
  if (v.IsScalar()) {
    out.push_back(present_integer(k, key));
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = str_cat(at(key), "[", i, "]");
    const int64_t x = scalar_integer(v[i], where);
    if (k.range && !k.range->contains(x)) bad(where, "must be ", k.range->text(), ", got ", x);
    out.push_back(x);
  }
  return out;
}

Section Section::section(const std::string& key) const {
  declared(key, KeyType::kSection);
  return Section(has(key) ? get(key) : YAML::Node(), at(key), join_key(pattern_, key));
}

std::vector<Section> Section::list(const std::string& key) const {
  declared(key, KeyType::kList);
  std::vector<Section> out;
  if (!has(key)) return out;
  KeyReadLog::note(join_key(pattern_, key) + "[]");
  const YAML::Node v = get(key);
  for (size_t i = 0; i < v.size(); ++i)
    out.emplace_back(v[i], str_cat(at(key), "[", i, "]"), join_key(pattern_, key) + "[]");
  return out;
}

std::vector<std::pair<std::string, YAML::Node>> Section::entries(const std::string& key) const {
  declared(key, KeyType::kFreeMap);
  std::vector<std::pair<std::string, YAML::Node>> out;
  if (!has(key)) return out;
  KeyReadLog::note(join_key(pattern_, key) + ".*");
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

std::vector<std::pair<std::string, Section>> Section::named_sections(const std::string& key) const {
  declared(key, KeyType::kFreeMap);
  const std::string pattern = join_key(pattern_, key) + ".*";
  const SchemaKey* each = find_schema_key(pattern);
  if (each == nullptr || each->type != KeyType::kSection)
    reader_bug(key, "read as named sections, but its values are not declared a section");
  std::vector<std::pair<std::string, Section>> out;
  if (!has(key)) return out;
  KeyReadLog::note(pattern);
  std::set<std::string> seen;
  for (const auto& kv : get(key)) {
    if (!kv.first.IsScalar()) bad(at(key), "a name is not a plain string");
    const std::string name = kv.first.Scalar();
    const std::string where = join_key(at(key), name);
    if (!seen.insert(name).second) bad(where, "given twice (YAML would keep only the first)");
    if (!kv.second.IsMap()) bad(where, "expected a section (a map of keys), got ", describe(kv.second));
    out.emplace_back(name, Section(kv.second, where, pattern));
  }
  return out;
}

void Section::refuse(const std::vector<std::string>& keys, const std::string& why) const {
  for (const std::string& k : keys) {
    if (find_schema_key(join_key(pattern_, k)) == nullptr) reader_bug(k, "refused but not declared");
    if (has(k)) bad(at(k), why);
  }
}

std::string Section::describe(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsScalar()) return quote_for_error(n.Scalar());
  return "nothing";
}

}  // namespace coppice::job_config
