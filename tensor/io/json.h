// A small, strict, bounded JSON reader (and the string quoting a writer needs).
//
// Built for file headers we do not trust (safetensors): it accepts RFC 8259
// JSON except that numbers must be integers that fit in int64 (no fraction, no
// exponent), and it enforces limits on input size, nesting depth and the
// number of values, so that hostile input costs bounded memory and stack.
// Strings must be valid UTF-8; \uXXXX escapes (with surrogate pairs) are
// decoded to UTF-8. Objects keep their members in input order and reject
// duplicate keys. Errors are absl::Status values that give the byte offset.
//
// Cost: time linear in the input (duplicate keys are found through a hash
// set per object, not by comparing each key with the ones before it), memory
// linear in the input, stack depth bounded by max_depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace coppice::json {

class Value {
 public:
  // In the order of the alternatives of data_.
  enum class Kind : uint8_t { kNull, kBool, kInteger, kString, kArray, kObject };
  using Member = std::pair<std::string, Value>;

  Value() = default;
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value string(std::string s);
  static Value array(std::vector<Value> items);
  static Value object(std::vector<Member> members);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_null() const { return kind() == Kind::kNull; }
  bool is_integer() const { return kind() == Kind::kInteger; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }

  // Accessors for the matching kind (the value of another kind is unspecified
  // but safe: false, 0, an empty string or an empty list).
  bool as_bool() const;
  int64_t as_integer() const;
  const std::string& as_string() const;
  const std::vector<Value>& items() const;
  const std::vector<Member>& members() const;

  // The member named `key` of an object, or nullptr. A linear scan: meant for
  // objects of a few known fields; iterate members() over large ones.
  const Value* find(const std::string& key) const;

 private:
  // One alternative at a time (a value of a header costs 40 bytes, a member
  // 72, where separate fields for every kind cost over 100).
  std::variant<std::monostate, bool, int64_t, std::string, std::vector<Value>, std::vector<Member>> data_;
};

// "null", "bool", "integer", "string", "array", "object".
const char* kind_name(Value::Kind kind);

struct ParseLimits {
  size_t max_bytes = size_t{100} << 20;  // input size
  int max_depth = 64;                    // nested arrays/objects
  size_t max_values = size_t{1} << 21;   // values of any kind, containers included
};

// Parses exactly one JSON value, with optional whitespace around it.
absl::StatusOr<Value> parse(const char* data, size_t size, const ParseLimits& limits = {});
absl::StatusOr<Value> parse(const std::string& text, const ParseLimits& limits = {});

// `s` as a JSON string literal, quotes included. Control characters, '"' and
// '\' are escaped; other bytes pass through (the caller supplies UTF-8).
std::string quote(const std::string& s);

}  // namespace coppice::json
