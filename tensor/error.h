// coppice::Error and the checks that throw it.
//
// Misuse of an op (shape, dtype, device, format mismatch, bad indices) throws
// coppice::Error with a message that names the op, the operands and what was
// expected (docs/architecture.md, Errors). Parsers return absl::Status instead.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace coppice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates anything that can be streamed. (Debian's Abseil is built with
// its own string_view, so absl::StrCat does not take std::string_view.)
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// Joins the streamed elements of `items` with `sep`.
template <typename Range>
std::string str_join(const Range& items, const char* sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& item : items) {
    if (!first) os << sep;
    os << item;
    first = false;
  }
  return os.str();
}

// Joins the first `shown` elements of `items` with `sep`, and says how many
// there are in all when that is more ("a, b, ... (9 in all)"), so that a
// list that came from a file keeps a message to one readable line.
template <typename Range>
std::string str_join_some(const Range& items, const char* sep, size_t shown = 8) {
  std::ostringstream os;
  size_t n = 0;
  for (const auto& item : items) {
    if (n < shown) os << (n > 0 ? sep : "") << item;
    ++n;
  }
  if (n > shown) os << sep << "... (" << n << " in all)";
  return os.str();
}

// `s` as one printable line, for messages that quote bytes from outside (a
// job file, a --set value, a file name): line breaks, tabs and other control
// bytes become \n, \r, \t and \xHH, so that a message stays the one line a
// binary prints last and a terminal shows what is there.
inline std::string one_line(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

// Throws coppice::Error whose message is the concatenation of `parts`.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(str_cat(parts...));
}

}  // namespace coppice

// COPPICE_CHECK(cond, "op: message ", value, ...): throws coppice::Error with
// the concatenated message when `cond` is false.
#define COPPICE_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::coppice::fail(__VA_ARGS__); \
  } while (0)
