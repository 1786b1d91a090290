// Tests for distributed/tcp_rendezvous.h: threads as ranks on a free
// loopback port: worlds of 1, 2 and 4, binary payloads, a root that starts
// late, a root that never comes, a peer with the wrong world size, the same
// rank twice, and garbage on the wire in both directions. Strangers (wrong
// tokens, silence, garbage, oversized hellos, floods) and where rank 0
// listens are in tcp_rendezvous_strangers_test.cc.
#include "distributed/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distributed/rendezvous_wire.h"
#include "gtest/gtest.h"
#include "tests/distributed/rendezvous_test_util.h"

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using rendezvous_test::free_port;
using rendezvous_test::message;
using rendezvous_test::spec_for;

// Runs rendezvous_broadcast on `world` threads (rank 0 after `root_delay`)
// and returns each rank's result.
std::vector<absl::StatusOr<std::string>> run_world(int world, const std::string& payload,
                                                   milliseconds root_delay = milliseconds(0)) {
  const int port = free_port();
  std::vector<absl::StatusOr<std::string>> results(world, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      if (r == 0) std::this_thread::sleep_for(root_delay);
      results[r] = rendezvous_broadcast(spec_for(port, r, world), r == 0 ? payload : "ignored");
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

class RendezvousWorld : public ::testing::TestWithParam<int> {};

TEST_P(RendezvousWorld, EveryRankGetsTheRootsPayload) {
  const std::string payload = "nccl-id-0123456789";
  std::vector<absl::StatusOr<std::string>> results = run_world(GetParam(), payload);
  for (int r = 0; r < GetParam(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << message(results[r].status());
    EXPECT_EQ(*results[r], payload) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RendezvousWorld, ::testing::Values(1, 2, 4));

TEST(Rendezvous, WorldOfOneNeedsNoAddress) {
  RendezvousSpec s;  // no address, no port
  absl::StatusOr<std::string> got = rendezvous_broadcast(s, "x");
  ASSERT_TRUE(got.ok()) << message(got.status());
  EXPECT_EQ(*got, "x");
}

TEST(Rendezvous, BinaryPayloadWithZeroBytes) {
  std::string payload(128, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 37) % 256);
  payload[5] = '\0';
  payload[127] = '\0';
  std::vector<absl::StatusOr<std::string>> results = run_world(4, payload);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << message(results[r].status());
    EXPECT_EQ(results[r]->size(), 128u);
    EXPECT_EQ(*results[r], payload) << "rank " << r;
  }
}

TEST(Rendezvous, EmptyPayload) {
  std::vector<absl::StatusOr<std::string>> results = run_world(2, "");
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << message(results[r].status());
    EXPECT_EQ(*results[r], "");
  }
}

TEST(Rendezvous, RootStartingLate) {
  std::vector<absl::StatusOr<std::string>> results = run_world(3, "late", milliseconds(700));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << message(results[r].status());
    EXPECT_EQ(*results[r], "late");
  }
}

TEST(Rendezvous, TimesOutWhenTheRootNeverComes) {
  const int port = free_port();
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> got = rendezvous_broadcast(spec_for(port, 1, 2, milliseconds(500)), "");
  const auto took = Clock::now() - start;
  ASSERT_FALSE(got.ok());
  const std::string m = message(got.status());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << m;
  EXPECT_NE(m.find("rank 1 could not reach 127.0.0.1:" + std::to_string(port) + " within 0.5 s"), std::string::npos)
      << m;
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
  EXPECT_GE(took, milliseconds(450));
  EXPECT_LT(took, milliseconds(5000));
}

TEST(Rendezvous, RootTimesOutNamingTheMissingRanks) {
  const int port = free_port();
  std::thread peer([&] { (void)rendezvous_broadcast(spec_for(port, 2, 4, milliseconds(800)), ""); });
  absl::StatusOr<std::string> got = rendezvous_broadcast(spec_for(port, 0, 4, milliseconds(600)), "p");
  peer.join();
  ASSERT_FALSE(got.ok());
  const std::string m = message(got.status());
  EXPECT_NE(m.find("ranks 1, 3 did not connect within 0.6 s"), std::string::npos) << m;
}

TEST(Rendezvous, PeerWithWrongWorldSize) {
  const int port = free_port();
  absl::StatusOr<std::string> peer_result = absl::UnknownError("not run");
  std::thread peer([&] { peer_result = rendezvous_broadcast(spec_for(port, 1, 3, milliseconds(5000)), ""); });
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> root = rendezvous_broadcast(spec_for(port, 0, 2, milliseconds(5000)), "p");
  peer.join();
  ASSERT_FALSE(root.ok());
  EXPECT_NE(message(root.status()).find("has world size 3, rank 0 has 2"), std::string::npos) << message(root.status());
  ASSERT_FALSE(peer_result.ok());
  EXPECT_NE(message(peer_result.status()).find("refused"), std::string::npos) << message(peer_result.status());
  EXPECT_NE(message(peer_result.status()).find("world size 3"), std::string::npos) << message(peer_result.status());
  EXPECT_LT(Clock::now() - start, milliseconds(4000));  // told at once, not at the timeout
}

TEST(Rendezvous, DuplicateRank) {
  const int port = free_port();
  std::vector<std::thread> peers;
  for (int i = 0; i < 2; ++i) {
    peers.emplace_back([&] { (void)rendezvous_broadcast(spec_for(port, 1, 3, milliseconds(3000)), ""); });
  }
  absl::StatusOr<std::string> root = rendezvous_broadcast(spec_for(port, 0, 3, milliseconds(3000)), "p");
  for (std::thread& t : peers) t.join();
  ASSERT_FALSE(root.ok());
  EXPECT_NE(message(root.status()).find("rank 1 connected twice"), std::string::npos) << message(root.status());
}

TEST(Rendezvous, BadArguments) {
  EXPECT_FALSE(rendezvous_broadcast(spec_for(1234, 2, 2), "").ok());
  EXPECT_FALSE(rendezvous_broadcast(spec_for(0, 1, 2), "").ok());
  EXPECT_FALSE(rendezvous_broadcast(spec_for(1234, 1, 2, milliseconds(0)), "").ok());
  RendezvousSpec no_addr = spec_for(1234, 1, 2);
  no_addr.master_addr = "";
  EXPECT_FALSE(rendezvous_broadcast(no_addr, "").ok());
}

TEST(Rendezvous, AWorldAboveOneNeedsAValidToken) {
  for (int rank : {0, 1}) {
    RendezvousSpec none = spec_for(1234, rank, 2);
    none.job_token = "";
    absl::StatusOr<std::string> got = rendezvous_broadcast(none, "");
    ASSERT_FALSE(got.ok());
    EXPECT_NE(message(got.status()).find("no job token"), std::string::npos) << message(got.status());
    EXPECT_NE(message(got.status()).find("COPPICE_JOB_TOKEN"), std::string::npos) << message(got.status());

    RendezvousSpec short_token = spec_for(1234, rank, 2);
    short_token.job_token = "s3cret";
    got = rendezvous_broadcast(short_token, "");
    ASSERT_FALSE(got.ok());
    EXPECT_NE(message(got.status()).find("the job token has 6 characters, fewer than 16"), std::string::npos)
        << message(got.status());
    EXPECT_EQ(message(got.status()).find("s3cret"), std::string::npos) << message(got.status());
  }
  RendezvousSpec alone;  // a world of one needs none
  EXPECT_TRUE(rendezvous_broadcast(alone, "x").ok());
}

TEST(Rendezvous, UnresolvableNameTimesOutNamingIt) {
  RendezvousSpec s = spec_for(1234, 1, 2, milliseconds(300));
  s.master_addr = "no-such-host.invalid";
  absl::StatusOr<std::string> got = rendezvous_broadcast(s, "");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(message(got.status()).find("no-such-host.invalid"), std::string::npos) << message(got.status());
}

// A raw client: connects to the port (retrying until the root listens) and sends `bytes`.
void raw_client(int port, const std::string& bytes, bool linger_open) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      if (!bytes.empty()) (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (linger_open) std::this_thread::sleep_for(milliseconds(300));
      ::close(fd);
      return;
    }
    ::close(fd);
    std::this_thread::sleep_for(milliseconds(20));
  }
}

TEST(Rendezvous, GarbageFromClientsIsDropped) {
  const int port = free_port();
  std::vector<std::thread> threads;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  threads.emplace_back([&] { root = rendezvous_broadcast(spec_for(port, 0, 2, milliseconds(5000)), "ok"); });
  threads.emplace_back([&] { raw_client(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false); });
  threads.emplace_back([&] { raw_client(port, std::string("\x43\x50\x52", 3), false); });  // short, then closed
  threads.emplace_back([&] { raw_client(port, std::string(16, '\xff'), true); });
  threads.emplace_back([&] { raw_client(port, "", true); });  // says nothing
  absl::StatusOr<std::string> peer = absl::UnknownError("not run");
  threads.emplace_back([&] {
    std::this_thread::sleep_for(milliseconds(200));
    peer = rendezvous_broadcast(spec_for(port, 1, 2, milliseconds(5000)), "");
  });
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(peer.ok()) << message(peer.status());
  EXPECT_EQ(*peer, "ok");
}

// A fake root that answers every connection with `bytes`.
void fake_root(int port, const std::string& bytes) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  const int fd = ::accept(lfd, nullptr, nullptr);
  char hello[rendezvous_wire::kHelloSize];
  (void)::recv(fd, hello, sizeof(hello), MSG_WAITALL);
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  std::this_thread::sleep_for(milliseconds(200));
  ::close(fd);
  ::close(lfd);
}

TEST(Rendezvous, GarbageFromTheRootIsAnError) {
  struct Case {
    std::string bytes;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"HTTP/1.1 400 Bad Request\r\n\r\n", "not a rendezvous reply"},
      {std::string("\x43\x50\x52\x50\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff", 16), "announced a payload"},
      {std::string("\x43\x50\x52\x50\0\0\0\0\0\0\0\0\0\0\0\x40"
                   "abc",
                   19),
       "cut short"},
      {"CPR", "got no answer"},
  };
  for (const Case& c : cases) {
    const int port = free_port();
    std::thread root([&] { fake_root(port, c.bytes); });
    absl::StatusOr<std::string> got = rendezvous_broadcast(spec_for(port, 1, 2, milliseconds(3000)), "");
    root.join();
    ASSERT_FALSE(got.ok()) << c.expect;
    EXPECT_NE(message(got.status()).find(c.expect), std::string::npos) << message(got.status());
  }
}

TEST(Rendezvous, PortInUseIsAnErrorNamingIt) {
  const int port = free_port();
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  absl::StatusOr<std::string> got = rendezvous_broadcast(spec_for(port, 0, 2, milliseconds(500)), "p");
  ::close(lfd);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(message(got.status()).find("could not listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << message(got.status());
}

}  // namespace
}  // namespace coppice
