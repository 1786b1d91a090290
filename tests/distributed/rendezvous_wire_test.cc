// distributed/rendezvous_wire.h: rank 0's judgement of a connection's first
// bytes, byte by byte, without sockets.
#include "distributed/rendezvous_wire.h"

#include <string>

#include "gtest/gtest.h"

namespace coppice {
namespace rendezvous_wire {
namespace {

const char kToken[] = "0123456789abcdef0123456789abcdef";
using Kind = HelloVerdict::Kind;

TEST(RendezvousWire, AHelloIsAcceptedOnlyWhenWhole) {
  const std::string hello = encode_hello(3, 8, kToken);
  ASSERT_EQ(hello.size(), kHelloSize);
  for (size_t n = 0; n < kHelloSize; ++n) {
    EXPECT_EQ(check_hello(hello.substr(0, n), kToken).kind, Kind::kIncomplete) << n << " bytes";
  }
  const HelloVerdict v = check_hello(hello, kToken);
  ASSERT_EQ(v.kind, Kind::kAccepted) << v.reason;
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.world_size, 8);
}

TEST(RendezvousWire, RefusalsAreDecidedEarlyAndNeverQuoteTheToken) {
  // Garbage: after 4 bytes.
  HelloVerdict v = check_hello("GET ", kToken);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("not a rendezvous hello"), std::string::npos);
  EXPECT_FALSE(v.tell_peer);
  // Another version: after 8 bytes, and worth telling the peer.
  std::string old = encode_hello(1, 2, kToken).substr(0, 8);
  old[7] = 1;
  v = check_hello(old, kToken);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("speaks rendezvous version 1, this build speaks 2"), std::string::npos) << v.reason;
  EXPECT_TRUE(v.tell_peer);
  // A wrong token, or one that is a prefix or an extension of the right one.
  for (const std::string& wrong : {std::string("fedcba9876543210fedcba9876543210"), std::string(kToken).substr(0, 20),
                                   std::string(kToken) + "0"}) {
    v = check_hello(encode_hello(1, 2, wrong), kToken);
    EXPECT_EQ(v.kind, Kind::kRefused) << wrong;
    EXPECT_NE(v.reason.find("a wrong job token"), std::string::npos) << v.reason;
    EXPECT_TRUE(v.tell_peer);
    EXPECT_EQ(v.reason.find(wrong), std::string::npos) << v.reason;
    EXPECT_EQ(v.reason.find(kToken), std::string::npos) << v.reason;
  }
  // A token length past the bound, and bytes smuggled after the token.
  std::string long_token = encode_hello(1, 2, kToken);
  long_token[16] = 0x7f;
  v = check_hello(long_token, kToken);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("a malformed hello (a token of"), std::string::npos) << v.reason;
  std::string smuggled = encode_hello(1, 2, kToken);
  smuggled.back() = 'x';
  v = check_hello(smuggled, kToken);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("bytes after its token"), std::string::npos) << v.reason;
}

TEST(RendezvousWire, Reply) {
  const std::string r = encode_reply(1, "why");
  const ReplyHeader h = decode_reply_header(r.substr(0, kReplyHeaderSize));
  EXPECT_TRUE(h.magic_ok);
  EXPECT_EQ(h.status, 1u);
  EXPECT_EQ(h.length, 3u);
  EXPECT_EQ(r.substr(kReplyHeaderSize), "why");
  EXPECT_FALSE(decode_reply_header("HTTP/1.1 200 OK\r\n").magic_ok);
}

}  // namespace
}  // namespace rendezvous_wire
}  // namespace coppice
