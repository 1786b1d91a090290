// Values from outside (an argument, a job value, a key, a path) as error
// messages quote them: one printable line (one_line, tensor/error.h), and no
// longer than a line can show. A 100,000-byte value is quoted by its first
// bytes and its size, so that the message stays one readable line that
// still says what is wrong and where:
//
//   --max-steps needs a whole number of steps >= 1, got '99999...' (100000 bytes)
//
// bounded_error_line is the net under every line the trainer ends with: a
// value that reached a message unshortened is shortened there.
#pragma once

#include <cstddef>
#include <string>

namespace coppice {

// Values up to this many bytes are quoted whole.
inline constexpr size_t kQuotedMaxBytes = 60;

// `value` in single quotes, made one line; when longer than kQuotedMaxBytes,
// its first bytes (cut at a UTF-8 character boundary), "...", and its size:
// 'abcabc...' (100000 bytes).
std::string quote_for_error(const std::string& value);

// The same without the quotes, for a value that a message shows as a name
// (a key path, a file): abcabc... (100000 bytes).
std::string shorten_for_error(const std::string& value);

// Words (runs without a space) longer than this in a message are values
// that nothing shortened.
inline constexpr size_t kErrorWordMaxBytes = 256;
// A message line longer than this loses its middle.
inline constexpr size_t kErrorLineMaxBytes = 4096;

// `message` made one line of at most about kErrorLineMaxBytes: each word
// longer than kErrorWordMaxBytes shortened as shorten_for_error does, and
// then, if the line is still too long, its middle replaced by
// "... (N bytes left out) ...", keeping the start (what and where) and the
// end (what was expected, a did-you-mean).
std::string bounded_error_line(const std::string& message);

}  // namespace coppice
