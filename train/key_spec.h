// One key of a job file as data (train/job_keys.cc declares them all): its
// path, type, line of documentation, default, and the values it accepts (a
// numeric range or a list of choices). The loader's readers take the
// default, range and choices from here (train/config_section.h), and the job
// reference page prints them (train/job_reference.h), so a key is declared
// once and both follow.
//
// Paths are dotted; "[]" stands for any element of a list and "*" for any
// key of a free-form map (model options, sparsifier parameters, per-layer
// density overrides, formats declared by name):
//   optimizer.lr   sparsity.rules[].format   model.options.*   sparsity.formats.*.levels
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "yaml-cpp/yaml.h"

namespace coppice {

enum class KeyType {
  kSection,  // a map of the keys below it
  kList,     // a list of sections (path + "[]")
  kFreeMap,  // a map whose keys are free (path + ".*" holds the values' type: scalars, or a section per name)
  kInt,
  kDouble,  // also accepts an integer
  kBool,    // true/false, yes/no, on/off
  kString,
  kStringList,  // a list of strings (a single string counts as a list of one)
  kIntList,     // a list of integers (a single integer counts as a list of one); a range bounds each
  kScalar,      // any scalar or list of scalars (model options, sparsifier parameters)
};
const char* key_type_name(KeyType type);  // "an integer", "a number", ...
// Whether a YAML value fits `type` (null fits anything: the default).
bool value_fits(const YAML::Node& value, KeyType type);
// Whether `text` is an integer literal as YAML and yaml-cpp read one (an
// optional sign, then decimal digits or 0x and hex digits), of any size. An
// integer key given one that does not fit int64 is refused by the loader as
// "does not fit", not as "not an integer".
bool is_integer_literal(const std::string& text);

// The values a numeric key accepts. Integers: [min, max], or, for seeds, any
// unsigned 64-bit integer. Numbers: finite, from lo to hi, each end open or
// closed (an infinite end is open).
struct KeyRange {
  KeyType type = KeyType::kInt;
  bool seed = false;
  int64_t min = 0, max = 0;
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;

  bool contains(int64_t v) const;
  bool contains(double v) const;
  // For messages: "in [1, 16777216]", "in [0, 18446744073709551615]", "> 0", ">= 0", "in (0, 1]".
  std::string text() const;
};
// Integers in [min, max].
KeyRange ints(int64_t min, int64_t max);
// Any unsigned 64-bit integer.
KeyRange any_seed();
// Numbers from lo to hi; `ends` is "[]", "[)", "(]" or "()".
KeyRange reals(double lo, double hi, const char* ends = "[]");

// A number as the reference page and messages show it: six significant
// digits, exponents without padding ("1e-8", not "1e-08").
std::string number_text(double v);

// What a key is when the job leaves it out.
struct KeyDefault {
  enum class Kind {
    kNone,      // nothing: the reader asks has() and its absence means what `words` says
    kValue,     // `value` (`words`, if any, says what that value means: "0: off")
    kRequired,  // the reader refuses its absence (`words`: when it applies)
    kComputed,  // from other keys or the program: the reader computes it, `words` says from what
  };
  Kind kind = Kind::kNone;
  std::variant<std::monostate, int64_t, double, bool, std::string> value;
  std::string words;

  // "64", "0: off", "\"\": none", "required", "default: the job's seed", or "" for kNone without words.
  std::string text() const;
};

// The values a string key accepts, when they are a list: given here, or
// asked of a registry each time (formats and models a program may add to).
struct KeyChoices {
  std::vector<std::string> names;
  std::vector<std::string> (*from)() = nullptr;

  bool empty() const { return names.empty() && from == nullptr; }
  std::vector<std::string> list() const { return from != nullptr ? from() : names; }
};

// One key. Built with the chained setters below, so that a declaration reads
// as one statement (train/job_keys.cc):
//   key("data.batch_size", K::kInt, "training batch size").defaults_to(64).in(ints(1, kMaxBatchSize))
struct SchemaKey {
  std::string path;  // "optimizer.lr", "sparsity.rules[].format", "model.options.*"
  KeyType type = KeyType::kSection;
  std::string doc;  // one line: what the key does (default, range and choices are the fields below)
  KeyDefault default_value;
  std::optional<KeyRange> range;  // every kInt and kDouble key has one; a string key may (loss_scale's number)
  KeyChoices choices;             // a kString key may have them

  template <typename T>
  SchemaKey defaults_to(T v, std::string words = "") const {
    SchemaKey k = *this;
    k.default_value.kind = KeyDefault::Kind::kValue;
    if constexpr (std::is_same_v<T, bool>) {
      k.default_value.value = v;
    } else if constexpr (std::is_integral_v<T>) {
      if (type == KeyType::kDouble) {
        k.default_value.value = static_cast<double>(v);
      } else {
        k.default_value.value = static_cast<int64_t>(v);
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      k.default_value.value = static_cast<double>(v);
    } else {
      k.default_value.value = std::string(v);
    }
    k.default_value.words = std::move(words);
    return k;
  }
  SchemaKey computed(std::string from_what) const { return with_default(KeyDefault::Kind::kComputed, from_what); }
  SchemaKey required(std::string when = "") const { return with_default(KeyDefault::Kind::kRequired, when); }
  SchemaKey absent_means(std::string what) const { return with_default(KeyDefault::Kind::kNone, what); }
  SchemaKey in(KeyRange r) const {
    SchemaKey k = *this;
    k.range = r;
    return k;
  }
  SchemaKey one_of(std::vector<std::string> names) const {
    SchemaKey k = *this;
    k.choices.names = std::move(names);
    return k;
  }
  SchemaKey one_of(std::vector<std::string> (*from)()) const {
    SchemaKey k = *this;
    k.choices.from = from;
    return k;
  }

 private:
  SchemaKey with_default(KeyDefault::Kind kind, std::string words) const {
    SchemaKey k = *this;
    k.default_value.kind = kind;
    k.default_value.words = std::move(words);
    return k;
  }
};

// What the key takes, for the reference page: its type, then its range or
// its choices ("an integer, in [1, 16777216]", "one of sgd | adam | adamw").
std::string accepts_text(const SchemaKey& key);

}  // namespace coppice
