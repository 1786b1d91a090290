// The bytes of the TCP rendezvous (distributed/tcp_rendezvous.h), kept apart
// from the sockets so that rank 0's judgement of a hello can be tested alone.
//
// All integers big-endian. A rank's hello has a fixed size, so that rank 0
// never reads more than kHelloSize bytes from anyone:
//   magic "CPRV" (u32), version (u32), rank (u32), world size (u32),
//   token length (u32), token (kMaxJobTokenChars bytes, zero-padded)
// Rank 0's reply: magic "CPRP" (u32), status (u32: 0 ok, else the body is the
// reason for a refusal), body length (u64), body (the payload when ok).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "distributed/job_token.h"

namespace coppice {
namespace rendezvous_wire {

constexpr uint32_t kHelloMagic = 0x43505256;  // "CPRV"
constexpr uint32_t kReplyMagic = 0x43505250;  // "CPRP"
// 2: the job token (version 1, without it, is refused by name).
constexpr uint32_t kVersion = 2;
constexpr size_t kHelloHeaderSize = 20;
constexpr size_t kHelloSize = kHelloHeaderSize + kMaxJobTokenChars;
constexpr size_t kReplyHeaderSize = 16;
constexpr uint64_t kMaxPayload = uint64_t{1} << 20;

// A rank's hello. `token` must follow job_token.h's rules.
std::string encode_hello(int rank, int world_size, std::string_view token);

// What rank 0 makes of the first bytes of a connection (at most kHelloSize).
struct HelloVerdict {
  enum class Kind {
    kIncomplete,  // nothing wrong so far; more bytes are needed
    kRefused,     // not a hello of this job: `reason` says why
    kAccepted,    // a complete hello carrying the job's token
  };
  Kind kind = Kind::kIncomplete;
  std::string reason;      // kRefused: what was wrong, never the token
  bool tell_peer = false;  // kRefused: the peer speaks the protocol, so a refusal reply helps it
  int64_t rank = -1;       // kAccepted: as sent (range not yet checked)
  int64_t world_size = 0;  // kAccepted
};

// Judges `bytes`, the first bytes a connection sent (at most kHelloSize), as
// soon as they decide anything: the magic after 4 bytes, the version after 8,
// the token (compared in constant time with `job_token`) once complete.
HelloVerdict check_hello(std::string_view bytes, std::string_view job_token);

// Rank 0's reply: status 0 and the payload, or a refusal and its reason.
std::string encode_reply(uint32_t status, const std::string& body);

// A reply's header, as read by a rank.
struct ReplyHeader {
  bool magic_ok = false;
  uint32_t status = 0;
  uint64_t length = 0;
};
ReplyHeader decode_reply_header(std::string_view header);  // kReplyHeaderSize bytes

}  // namespace rendezvous_wire
}  // namespace coppice
