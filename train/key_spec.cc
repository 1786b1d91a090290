// One job key as data (key_spec.h): its types, ranges and defaults as text.
#include "train/key_spec.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "tensor/error.h"

namespace coppice {

using K = KeyType;

const char* key_type_name(KeyType type) {
  switch (type) {
    case K::kSection: return "a section (a map)";
    case K::kList: return "a list";
    case K::kFreeMap: return "a map";
    case K::kInt: return "an integer";
    case K::kDouble: return "a number";
    case K::kBool: return "a boolean (true/false)";
    case K::kString: return "a string";
    case K::kStringList: return "a list of strings";
    case K::kIntList: return "a list of integers";
    case K::kScalar: return "a scalar (or a list of scalars)";
  }
  return "?";
}

namespace {

bool parses_int(const YAML::Node& n) {
  if (is_integer_literal(n.Scalar())) return true;  // too large for int64 too: the loader says it does not fit
  try {
    n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

bool parses_double(const YAML::Node& n) {
  try {
    n.as<double>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

bool parses_bool(const YAML::Node& n) {
  try {
    n.as<bool>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// A section or list value is checked key by key by the loader afterwards.
bool value_fits(const YAML::Node& value, KeyType type) {
  if (value.IsNull()) return true;  // "key=" resets to the default
  switch (type) {
    case K::kSection:
    case K::kFreeMap: return value.IsMap();
    case K::kList: return value.IsSequence();
    case K::kInt: return value.IsScalar() && parses_int(value);
    case K::kDouble: return value.IsScalar() && parses_double(value);
    case K::kBool: return value.IsScalar() && parses_bool(value);
    case K::kString: return value.IsScalar();
    case K::kIntList: {
      if (value.IsScalar()) return parses_int(value);
      if (!value.IsSequence()) return false;
      for (const auto& e : value)
        if (!e.IsScalar() || !parses_int(e)) return false;
      return true;
    }
    case K::kScalar:  // a list of scalars too: model.options.sizes: [784, 300, 10]
    case K::kStringList: {
      if (value.IsScalar()) return true;
      if (!value.IsSequence()) return false;
      for (const auto& e : value)
        if (!e.IsScalar()) return false;
      return true;
    }
  }
  return false;
}

bool is_integer_literal(const std::string& text) {
  size_t i = text.empty() || (text[0] != '-' && text[0] != '+') ? 0 : 1;
  const bool hex = text.size() > i + 2 && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X');
  if (hex) i += 2;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (!(hex ? std::isxdigit(c) : std::isdigit(c))) return false;
  }
  return true;
}

bool KeyRange::contains(int64_t v) const {
  if (type == K::kDouble) return contains(static_cast<double>(v));
  return seed ? v >= 0 : v >= min && v <= max;
}

bool KeyRange::contains(double v) const {
  if (type == K::kInt) return std::trunc(v) == v && v >= -0x1p63 && v < 0x1p63 && contains(static_cast<int64_t>(v));
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string KeyRange::text() const {
  if (seed) return str_cat("in [0, ", std::numeric_limits<uint64_t>::max(), "]");
  if (type == K::kInt) return str_cat("in [", min, ", ", max, "]");
  std::ostringstream os;
  os.precision(15);  // bounds in full: 16777216, not 1.67772e+07
  if (hi == kInf) {
    os << (lo_open ? "> " : ">= ") << lo;
  } else {
    os << "in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
  }
  return os.str();
}

KeyRange ints(int64_t min, int64_t max) {
  KeyRange r;
  r.min = min;
  r.max = max;
  return r;
}

KeyRange any_seed() {
  KeyRange r;
  r.seed = true;
  return r;
}

KeyRange reals(double lo, double hi, const char* ends) {
  KeyRange r;
  r.type = K::kDouble;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = ends[0] == '(' || lo == -kInf;
  r.hi_open = ends[1] == ')' || hi == kInf;
  return r;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  // "1e-08" -> "1e-8": the exponent's padding says nothing.
  const size_t e = s.find('e');
  if (e != std::string::npos && e + 2 < s.size()) {
    size_t digits = e + 2;
    while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  }
  return s;
}

std::string KeyDefault::text() const {
  switch (kind) {
    case Kind::kNone: return words;
    case Kind::kRequired: return words.empty() ? std::string("required") : str_cat("required ", words);
    case Kind::kComputed: return str_cat("default: ", words);
    case Kind::kValue: break;
  }
  std::string shown;
  if (const auto* i = std::get_if<int64_t>(&value)) shown = std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) shown = number_text(*d);
  if (const auto* b = std::get_if<bool>(&value)) shown = *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&value)) shown = s->empty() ? std::string("\"\"") : *s;
  return words.empty() ? shown : str_cat(shown, ": ", words);
}

std::string accepts_text(const SchemaKey& key) {
  std::string what = key_type_name(key.type);
  if (key.range) what += ", " + key.range->text();
  if (!key.choices.empty()) what += ", one of " + str_join(key.choices.list(), " | ");
  return what;
}

}  // namespace coppice
