#include "distributed/rendezvous_wire.h"

#include "tensor/error.h"

namespace coppice {
namespace rendezvous_wire {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

HelloVerdict refused(std::string reason, bool tell_peer = false) {
  HelloVerdict v;
  v.kind = HelloVerdict::Kind::kRefused;
  v.reason = std::move(reason);
  v.tell_peer = tell_peer;
  return v;
}

}  // namespace

std::string encode_hello(int rank, int world_size, std::string_view token) {
  std::string out;
  out.reserve(kHelloSize);
  put_u32(out, kHelloMagic);
  put_u32(out, kVersion);
  put_u32(out, static_cast<uint32_t>(rank));
  put_u32(out, static_cast<uint32_t>(world_size));
  const size_t n = token.size() < kMaxJobTokenChars ? token.size() : kMaxJobTokenChars;
  put_u32(out, static_cast<uint32_t>(n));
  out.append(token.data(), n);
  out.resize(kHelloSize, '\0');
  return out;
}

HelloVerdict check_hello(std::string_view bytes, std::string_view job_token) {
  if (bytes.size() >= 4 && get_u32(bytes.data()) != kHelloMagic) {
    return refused("not a rendezvous hello (another program, or a port scanner?)");
  }
  if (bytes.size() >= 8) {
    const uint32_t version = get_u32(bytes.data() + 4);
    if (version != kVersion) {
      return refused(str_cat("speaks rendezvous version ", version, ", this build speaks ", kVersion,
                             " (a rank from another build of Coppice?)"),
                     /*tell_peer=*/true);
    }
  }
  if (bytes.size() < kHelloSize) return HelloVerdict{};

  const uint64_t token_length = get_u32(bytes.data() + 16);
  if (token_length > kMaxJobTokenChars) {
    return refused(
        str_cat("a malformed hello (a token of ", token_length, " bytes, more than ", kMaxJobTokenChars, ")"));
  }
  // Every byte past the token must be the zero padding: a hello is exactly
  // what encode_hello makes, nothing smuggled after it.
  bool padding_clean = true;
  for (size_t i = kHelloHeaderSize + token_length; i < kHelloSize; ++i) padding_clean &= bytes[i] == '\0';
  if (!padding_clean) return refused("a malformed hello (bytes after its token)");
  const std::string_view token = bytes.substr(kHelloHeaderSize, token_length);
  if (!job_tokens_match(token, job_token)) {
    return refused("a wrong job token (is COPPICE_JOB_TOKEN the same on every rank?)", /*tell_peer=*/true);
  }
  HelloVerdict v;
  v.kind = HelloVerdict::Kind::kAccepted;
  v.rank = get_u32(bytes.data() + 8);
  v.world_size = get_u32(bytes.data() + 12);
  return v;
}

std::string encode_reply(uint32_t status, const std::string& body) {
  std::string out;
  put_u32(out, kReplyMagic);
  put_u32(out, status);
  put_u64(out, body.size());
  out += body;
  return out;
}

ReplyHeader decode_reply_header(std::string_view header) {
  ReplyHeader h;
  if (header.size() < kReplyHeaderSize) return h;
  h.magic_ok = get_u32(header.data()) == kReplyMagic;
  h.status = get_u32(header.data() + 4);
  h.length = get_u64(header.data() + 8);
  return h;
}

}  // namespace rendezvous_wire
}  // namespace coppice
