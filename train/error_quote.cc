#include "train/error_quote.h"

#include "tensor/error.h"

namespace coppice {
namespace {

// The largest cut <= `at` that starts a UTF-8 character (continuation
// bytes are 10xxxxxx), so that a shortened value stays valid text.
size_t char_boundary(const std::string& s, size_t at) {
  while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) --at;
  return at;
}

std::string shortened(const std::string& value) {
  return str_cat(one_line(value.substr(0, char_boundary(value, kQuotedMaxBytes))), "...");
}

}  // namespace

std::string quote_for_error(const std::string& value) {
  if (value.size() <= kQuotedMaxBytes) return str_cat("'", one_line(value), "'");
  return str_cat("'", shortened(value), "' (", value.size(), " bytes)");
}

std::string shorten_for_error(const std::string& value) {
  if (value.size() <= kQuotedMaxBytes) return one_line(value);
  return str_cat(shortened(value), " (", value.size(), " bytes)");
}

std::string bounded_error_line(const std::string& message) {
  const std::string line = one_line(message);
  std::string out;
  for (size_t at = 0; at < line.size();) {
    const size_t space = line.find(' ', at);
    const size_t end = space == std::string::npos ? line.size() : space;
    const std::string word = line.substr(at, end - at);
    out += word.size() > kErrorWordMaxBytes ? shorten_for_error(word) : word;
    if (space != std::string::npos) out += ' ';
    at = end + 1;
  }
  if (out.size() <= kErrorLineMaxBytes) return out;
  const size_t head = char_boundary(out, kErrorLineMaxBytes * 3 / 4);
  const size_t tail = char_boundary(out, out.size() - kErrorLineMaxBytes / 4);
  return str_cat(out.substr(0, head), " ... (", tail - head, " bytes left out) ... ", out.substr(tail));
}

}  // namespace coppice
