#include "distributed/job_token.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "tensor/error.h"

namespace coppice {
namespace {

using Padded = std::array<unsigned char, kMaxJobTokenChars>;

// `s` zero-padded to kMaxJobTokenChars (cut there; the caller checks length).
Padded padded(std::string_view s) {
  Padded p{};
  std::memcpy(p.data(), s.data(), std::min(s.size(), p.size()));
  return p;
}

}  // namespace

std::string job_token_problem(std::string_view token) {
  if (token.size() < kMinJobTokenChars) {
    return str_cat("has ", token.size(), " characters, fewer than ", kMinJobTokenChars);
  }
  if (token.size() > kMaxJobTokenChars) {
    return str_cat("has ", token.size(), " characters, more than ", kMaxJobTokenChars);
  }
  for (char c : token) {
    const auto u = static_cast<unsigned char>(c);
    if (u < '!' || u > '~') {
      return "holds a space, a control character or a non-ASCII byte "
             "(use letters, digits and punctuation, e.g. the output of `openssl rand -hex 16`)";
    }
  }
  return "";
}

bool job_tokens_match(std::string_view a, std::string_view b) {
  const Padded pa = padded(a);
  const Padded pb = padded(b);
  // Volatile reads and an OR of every difference: no early exit, whatever
  // the optimizer would like to do with a plain loop.
  const volatile unsigned char* va = pa.data();
  const volatile unsigned char* vb = pb.data();
  unsigned char diff = 0;
  for (size_t i = 0; i < kMaxJobTokenChars; ++i) diff |= static_cast<unsigned char>(va[i] ^ vb[i]);
  // Integer arithmetic, not && and ||: no branch on any of the three.
  const uint64_t length_diff = static_cast<uint64_t>(a.size()) ^ static_cast<uint64_t>(b.size());
  const unsigned too_long =
      static_cast<unsigned>(a.size() > kMaxJobTokenChars) | static_cast<unsigned>(b.size() > kMaxJobTokenChars);
  return (static_cast<unsigned>(diff == 0) & static_cast<unsigned>(length_diff == 0) & (too_long ^ 1u)) != 0;
}

}  // namespace coppice
