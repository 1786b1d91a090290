// One parameter of a sparsifier spec (registry.h): an integer, a number, a
// boolean or a string, with its spelling. The job loader types a YAML value
// once, where it reads it (from_text), and the library passes the values it
// fills in (a rule's density as magnitude's sparsity, a rule's n:m) as
// numbers, so a density goes number -> number, never through a string and
// back. A value a program gives as a string (Python keywords, older C++)
// stays a string and is read as the type a factory asks for, as before.
//
// The spelling is what describe() and error messages show, and what
// checkpoints' job fingerprints hold: a value read from a job keeps the
// job's spelling ("0.90" stays "0.90").
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace coppice {

class SpecValue {
 public:
  enum class Kind { kString, kInteger, kNumber, kBool };

  SpecValue() = default;                                    // the empty string (std::map's operator[] needs one)
  SpecValue(const char* text) : text_(text) {}              // NOLINT: a string converts, as the params map took strings
  SpecValue(std::string text) : text_(std::move(text)) {}   // NOLINT
  SpecValue(int v) : SpecValue(static_cast<int64_t>(v)) {}  // NOLINT
  SpecValue(int64_t v);                                     // NOLINT
  SpecValue(double v);                                      // NOLINT: spelled as the shortest decimal that reads back
  SpecValue(bool v);                                        // NOLINT

  // Typed by its spelling, as the getters would read it: a decimal integer
  // that fits int64, else a finite number strtod reads whole, else one of
  // true/false/yes/no/on/off (any case), else a string.
  static SpecValue from_text(const std::string& text);

  Kind kind() const { return kind_; }
  const std::string& text() const { return text_; }

  // The value as each type, or nullopt when it is not one: an integer is a
  // number too, a number is never an integer ("2.0"), and a boolean is
  // true/false/yes/no/on/off/1/0 in any case. A string is parsed whole
  // (strtod, base-10 strtoll, failing on overflow); number() may return a
  // non-finite value (a string "inf"), which the getters refuse.
  std::optional<double> number() const;
  std::optional<int64_t> integer() const;
  std::optional<bool> boolean() const;

  // Same kind and value (strings: same text; numbers: equal as doubles).
  bool operator==(const SpecValue& other) const;
  bool operator!=(const SpecValue& other) const { return !(*this == other); }

 private:
  Kind kind_ = Kind::kString;
  std::string text_;
  int64_t integer_ = 0;
  double number_ = 0;
  bool boolean_ = false;
};

// The spelling, for str_cat and describe().
std::ostream& operator<<(std::ostream& os, const SpecValue& v);

}  // namespace coppice
