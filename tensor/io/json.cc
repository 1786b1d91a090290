#include "tensor/io/json.h"

#include <cstdio>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "tensor/error.h"

namespace coppice::json {

Value Value::boolean(bool b) {
  Value v;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.data_ = i;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.data_ = std::move(s);
  return v;
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.data_ = std::move(items);
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v;
  v.data_ = std::move(members);
  return v;
}

bool Value::as_bool() const {
  const bool* b = std::get_if<bool>(&data_);
  return b != nullptr && *b;
}

int64_t Value::as_integer() const {
  const int64_t* i = std::get_if<int64_t>(&data_);
  return i != nullptr ? *i : 0;
}

const std::string& Value::as_string() const {
  static const std::string kEmpty;
  const std::string* s = std::get_if<std::string>(&data_);
  return s != nullptr ? *s : kEmpty;
}

const std::vector<Value>& Value::items() const {
  static const std::vector<Value> kEmpty;
  const std::vector<Value>* items = std::get_if<std::vector<Value>>(&data_);
  return items != nullptr ? *items : kEmpty;
}

const std::vector<Value::Member>& Value::members() const {
  static const std::vector<Member> kEmpty;
  const std::vector<Member>* members = std::get_if<std::vector<Member>>(&data_);
  return members != nullptr ? *members : kEmpty;
}

const Value* Value::find(const std::string& key) const {
  for (const Member& m : members()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNull: return "null";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInteger: return "integer";
    case Value::Kind::kString: return "string";
    case Value::Kind::kArray: return "array";
    case Value::Kind::kObject: return "object";
  }
  return "?";
}

namespace {

// The keys of an object seen so far, held as indices into its member list
// (indices stay valid while the list grows), so that the duplicate-key check
// costs O(1) per key and the whole parse stays linear. absl::Hash is seeded
// per process, so crafted keys cannot be made to collide.
struct KeyHash {
  const std::vector<Value::Member>* members;
  size_t operator()(size_t i) const { return absl::Hash<std::string_view>()((*members)[i].first); }
};
struct KeyEq {
  const std::vector<Value::Member>* members;
  bool operator()(size_t a, size_t b) const { return (*members)[a].first == (*members)[b].first; }
};
using KeyIndex = absl::flat_hash_set<size_t, KeyHash, KeyEq>;

class Parser {
 public:
  Parser(const char* data, size_t size, const ParseLimits& limits) : p_(data), size_(size), limits_(limits) {}

  absl::StatusOr<Value> run() {
    if (size_ > limits_.max_bytes) {
      return absl::InvalidArgumentError(
          str_cat("json: input of ", size_, " bytes exceeds the limit of ", limits_.max_bytes, " bytes"));
    }
    skip_ws();
    Value v;
    if (!parse_value(&v, 0)) return error_;
    skip_ws();
    if (pos_ != size_) return fail("unexpected trailing characters after the JSON value");
    return v;
  }

 private:
  // Records an error at the current position; always returns false.
  bool fail_at(size_t pos, const std::string& what) {
    error_ = absl::InvalidArgumentError(str_cat("json: at byte ", pos, ": ", what));
    return false;
  }
  bool fail_here(const std::string& what) { return fail_at(pos_, what); }
  absl::Status fail(const std::string& what) {
    fail_here(what);
    return error_;
  }

  bool at_end() const { return pos_ >= size_; }
  unsigned char peek() const { return static_cast<unsigned char>(p_[pos_]); }

  std::string describe_here() const {
    if (at_end()) return "end of input";
    unsigned char c = peek();
    char buf[16];
    if (c >= 0x20 && c < 0x7f) {
      std::snprintf(buf, sizeof(buf), "'%c'", c);
    } else {
      std::snprintf(buf, sizeof(buf), "byte 0x%02x", c);
    }
    return buf;
  }

  void skip_ws() {
    while (!at_end()) {
      unsigned char c = peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool count_value() {
    if (++values_ > limits_.max_values) {
      return fail_here(str_cat("more than ", limits_.max_values, " values (limit)"));
    }
    return true;
  }

  bool expect_literal(const char* word, size_t len) {
    if (size_ - pos_ < len || std::char_traits<char>::compare(p_ + pos_, word, len) != 0) {
      return fail_here(str_cat("invalid literal (expected '", word, "')"));
    }
    pos_ += len;
    return true;
  }

  bool parse_value(Value* out, int depth) {
    if (!count_value()) return false;
    if (at_end()) return fail_here("unexpected end of input, expected a value");
    unsigned char c = peek();
    switch (c) {
      case '{': return parse_object(out, depth + 1);
      case '[': return parse_array(out, depth + 1);
      case '"': {
        std::string s;
        if (!parse_string(&s)) return false;
        *out = Value::string(std::move(s));
        return true;
      }
      case 't':
        if (!expect_literal("true", 4)) return false;
        *out = Value::boolean(true);
        return true;
      case 'f':
        if (!expect_literal("false", 5)) return false;
        *out = Value::boolean(false);
        return true;
      case 'n':
        if (!expect_literal("null", 4)) return false;
        *out = Value::null();
        return true;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_integer(out);
        return fail_here(str_cat("unexpected ", describe_here(), ", expected a value"));
    }
  }

  bool check_depth(int depth) {
    if (depth > limits_.max_depth) {
      return fail_here(str_cat("nesting deeper than ", limits_.max_depth, " levels (limit)"));
    }
    return true;
  }

  bool parse_object(Value* out, int depth) {
    if (!check_depth(depth)) return false;
    ++pos_;  // '{'
    std::vector<Value::Member> members;
    skip_ws();
    if (!at_end() && peek() == '}') {
      ++pos_;
      *out = Value::object(std::move(members));
      return true;
    }
    KeyIndex seen(0, KeyHash{&members}, KeyEq{&members});
    while (true) {
      skip_ws();
      if (at_end() || peek() != '"') {
        return fail_here(str_cat("unexpected ", describe_here(), ", expected a string key"));
      }
      size_t key_pos = pos_;
      std::string key;
      if (!parse_string(&key)) return false;
      // The value built in place (GCC 12 warns, wrongly, that moving a
      // default Value's variant may read it uninitialized).
      members.emplace_back(std::piecewise_construct, std::forward_as_tuple(std::move(key)), std::forward_as_tuple());
      if (!seen.insert(members.size() - 1).second) {
        return fail_at(key_pos, str_cat("duplicate key ", quote(members.back().first)));
      }
      skip_ws();
      if (at_end() || peek() != ':') return fail_here(str_cat("unexpected ", describe_here(), ", expected ':'"));
      ++pos_;
      skip_ws();
      if (!parse_value(&members.back().second, depth)) return false;
      skip_ws();
      if (at_end()) return fail_here("unexpected end of input, expected ',' or '}'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        break;
      }
      return fail_here(str_cat("unexpected ", describe_here(), ", expected ',' or '}'"));
    }
    *out = Value::object(std::move(members));
    return true;
  }

  bool parse_array(Value* out, int depth) {
    if (!check_depth(depth)) return false;
    ++pos_;  // '['
    std::vector<Value> items;
    skip_ws();
    if (!at_end() && peek() == ']') {
      ++pos_;
      *out = Value::array(std::move(items));
      return true;
    }
    while (true) {
      skip_ws();
      Value v;
      if (!parse_value(&v, depth)) return false;
      items.push_back(std::move(v));
      skip_ws();
      if (at_end()) return fail_here("unexpected end of input, expected ',' or ']'");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        break;
      }
      return fail_here(str_cat("unexpected ", describe_here(), ", expected ',' or ']'"));
    }
    *out = Value::array(std::move(items));
    return true;
  }

  bool parse_integer(Value* out) {
    size_t start = pos_;
    bool negative = false;
    if (peek() == '-') {
      negative = true;
      ++pos_;
    }
    if (at_end() || peek() < '0' || peek() > '9') return fail_here("expected a digit");
    if (peek() == '0' && pos_ + 1 < size_ && p_[pos_ + 1] >= '0' && p_[pos_ + 1] <= '9') {
      return fail_here("leading zeros are not allowed in numbers");
    }
    // Accumulate the magnitude as unsigned so that INT64_MIN is representable.
    uint64_t magnitude = 0;
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      uint64_t digit = peek() - '0';
      if (magnitude > (limit - digit) / 10) return fail_at(start, "integer out of the 64-bit range");
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (!at_end() && (peek() == '.' || peek() == 'e' || peek() == 'E')) {
      return fail_at(start, "only integers are supported (no fraction or exponent)");
    }
    int64_t value;
    if (negative) {
      value = magnitude == (uint64_t{1} << 63) ? INT64_MIN : -static_cast<int64_t>(magnitude);
    } else {
      value = static_cast<int64_t>(magnitude);
    }
    *out = Value::integer(value);
    return true;
  }

  static void append_utf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      s->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  bool parse_hex4(uint32_t* out) {
    if (size_ - pos_ < 4) return fail_here("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      unsigned char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return fail_here("invalid hex digit in \\u escape");
      }
      v = v * 16 + d;
      ++pos_;
    }
    *out = v;
    return true;
  }

  // One UTF-8 sequence starting at pos_ (a lead byte >= 0x80), validated
  // strictly (no overlongs, no surrogates, nothing above U+10FFFF).
  bool copy_utf8(std::string* s) {
    unsigned char c = peek();
    size_t len;
    uint32_t min;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2, min = 0x80, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, min = 0x800, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return fail_here(str_cat("invalid UTF-8 lead byte 0x", hex2(c), " in string"));
    }
    if (size_ - pos_ < len) return fail_here("truncated UTF-8 sequence in string");
    for (size_t i = 1; i < len; ++i) {
      unsigned char cc = static_cast<unsigned char>(p_[pos_ + i]);
      if ((cc & 0xc0) != 0x80) return fail_at(pos_ + i, "invalid UTF-8 continuation byte in string");
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return fail_here("invalid UTF-8 sequence (overlong, surrogate or out of range) in string");
    }
    s->append(p_ + pos_, len);
    pos_ += len;
    return true;
  }

  static std::string hex2(unsigned char c) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", c);
    return buf;
  }

  bool parse_string(std::string* out) {
    size_t start = pos_;
    ++pos_;  // opening quote
    std::string s;
    while (true) {
      if (at_end()) return fail_at(start, "unterminated string");
      unsigned char c = peek();
      if (c == '"') {
        ++pos_;
        break;
      }
      if (c < 0x20) return fail_here("unescaped control character in string");
      if (c >= 0x80) {
        if (!copy_utf8(&s)) return false;
        continue;
      }
      if (c != '\\') {
        s.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return fail_at(start, "unterminated string");
      char e = static_cast<char>(peek());
      ++pos_;
      switch (e) {
        case '"': s.push_back('"'); break;
        case '\\': s.push_back('\\'); break;
        case '/': s.push_back('/'); break;
        case 'b': s.push_back('\b'); break;
        case 'f': s.push_back('\f'); break;
        case 'n': s.push_back('\n'); break;
        case 'r': s.push_back('\r'); break;
        case 't': s.push_back('\t'); break;
        case 'u': {
          size_t esc = pos_ - 2;
          uint32_t cp = 0;
          if (!parse_hex4(&cp)) return false;
          if (cp >= 0xdc00 && cp <= 0xdfff) return fail_at(esc, "unpaired low surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (size_ - pos_ < 2 || p_[pos_] != '\\' || p_[pos_ + 1] != 'u') {
              return fail_at(esc, "high surrogate in \\u escape not followed by a low surrogate");
            }
            pos_ += 2;
            uint32_t lo = 0;
            if (!parse_hex4(&lo)) return false;
            if (lo < 0xdc00 || lo > 0xdfff) {
              return fail_at(esc, "high surrogate in \\u escape not followed by a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(&s, cp);
          break;
        }
        default: return fail_at(pos_ - 2, "invalid escape sequence in string");
      }
    }
    *out = std::move(s);
    return true;
  }

  const char* p_;
  size_t size_;
  ParseLimits limits_;
  size_t pos_ = 0;
  size_t values_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Value> parse(const char* data, size_t size, const ParseLimits& limits) {
  return Parser(data, size, limits).run();
}

absl::StatusOr<Value> parse(const std::string& text, const ParseLimits& limits) {
  return parse(text.data(), text.size(), limits);
}

std::string quote(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace coppice::json
