#include "sparsifiers/spec_value.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace coppice {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The registry's string parsers, unchanged: a factory reading a string gets
// what it got when every parameter was one.
std::optional<double> parse_number(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_integer(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<bool> parse_boolean(const std::string& text) {
  const std::string s = lower(text);
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  return std::nullopt;
}

// The shortest decimal that reads back as `x`.
std::string exact_decimal(double x) {
  for (int precision : {15, 17}) {
    std::ostringstream os;
    os << std::setprecision(precision) << x;
    if (precision == 17 || std::strtod(os.str().c_str(), nullptr) == x) return os.str();
  }
  return "";
}

}  // namespace

SpecValue::SpecValue(int64_t v) : kind_(Kind::kInteger), text_(std::to_string(v)), integer_(v) {}

SpecValue::SpecValue(double v) : kind_(Kind::kNumber), text_(exact_decimal(v)), number_(v) {}

SpecValue::SpecValue(bool v) : kind_(Kind::kBool), text_(v ? "true" : "false"), boolean_(v) {}

SpecValue SpecValue::from_text(const std::string& text) {
  SpecValue v(text);
  if (const std::optional<int64_t> i = parse_integer(text)) {
    v.kind_ = Kind::kInteger;
    v.integer_ = *i;
  } else if (const std::optional<double> d = parse_number(text); d && std::isfinite(*d)) {
    v.kind_ = Kind::kNumber;
    v.number_ = *d;
  } else if (const std::optional<bool> b = parse_boolean(text)) {
    v.kind_ = Kind::kBool;
    v.boolean_ = *b;
  }
  return v;
}

std::optional<double> SpecValue::number() const {
  switch (kind_) {
    case Kind::kNumber: return number_;
    case Kind::kInteger: return static_cast<double>(integer_);
    case Kind::kBool: return std::nullopt;
    case Kind::kString: return parse_number(text_);
  }
  return std::nullopt;
}

std::optional<int64_t> SpecValue::integer() const {
  switch (kind_) {
    case Kind::kInteger: return integer_;
    case Kind::kNumber:
    case Kind::kBool: return std::nullopt;
    case Kind::kString: return parse_integer(text_);
  }
  return std::nullopt;
}

std::optional<bool> SpecValue::boolean() const {
  // By the spelling for integers too: "1" and "0" are booleans, "01" is not.
  return kind_ == Kind::kBool ? std::optional<bool>(boolean_) : parse_boolean(text_);
}

bool SpecValue::operator==(const SpecValue& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kInteger: return integer_ == other.integer_;
    case Kind::kNumber: return number_ == other.number_;
    case Kind::kBool: return boolean_ == other.boolean_;
    case Kind::kString: return text_ == other.text_;
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, const SpecValue& v) { return os << v.text(); }

}  // namespace coppice
