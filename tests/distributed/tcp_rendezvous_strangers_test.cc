// distributed/tcp_rendezvous.h against strangers, over loopback: a rank with
// the wrong token, a connection that says nothing, garbage of every kind, an
// oversized hello, a flood of connections; each is refused and reported in
// one line on rank 0 (never with the token) while the job's ranks complete.
// Also: short timeouts end in about their time, and rank 0 listens on
// master_addr's address alone (127.0.0.2 is loopback on Linux but another
// address than 127.0.0.1; inside a network namespace of our own, when root
// may make one, a non-loopback address).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/rendezvous_wire.h"
#include "distributed/tcp_rendezvous.h"
#include "gtest/gtest.h"
#include "tests/distributed/rendezvous_test_util.h"

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using rendezvous_test::free_port;
using rendezvous_test::message;
using rendezvous_test::spec_for;

constexpr const char* kToken = rendezvous_test::kTestToken;
const char kWrongToken[] = "somebody-elses-token-98765";

// Rank 0's report lines, collected from its log callback.
class Lines {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> all() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  // Waits (up to 5 s) until at least `n` lines have come.
  bool wait_for(size_t n) const {
    const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < until) {
      if (all().size() >= n) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }
  // The lines holding `text`.
  int count(const std::string& text) const {
    int n = 0;
    for (const std::string& l : all()) n += l.find(text) != std::string::npos;
    return n;
  }
  std::string joined() const {
    std::string s;
    for (const std::string& l : all()) s += l + "\n";
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

sockaddr_in loopback(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

// A connected socket to ip:port, retrying (for up to 5 s) while nothing
// listens there yet; -1 if none came.
int connect_when_listening(const char* ip, int port) {
  const sockaddr_in addr = loopback(ip, port);
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < until) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(milliseconds(10));
  }
  return -1;
}

// One connect attempt: 0, or the errno it failed with.
int connect_errno(const char* ip, int port) {
  const sockaddr_in addr = loopback(ip, port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// Reads what the peer sends until it closes, for at most `ms`.
std::string read_until_closed(int fd, milliseconds ms) {
  timeval tv{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

// A hello's header by hand: magic, version, rank 1, world 2, token length.
std::string hello_header(uint32_t version, uint32_t token_length) {
  std::string h;
  put_u32(h, rendezvous_wire::kHelloMagic);
  put_u32(h, version);
  put_u32(h, 1);
  put_u32(h, 2);
  put_u32(h, token_length);
  return h;
}

// Every line and error must keep both tokens to itself.
void expect_no_token(const std::string& text) {
  EXPECT_EQ(text.find(kToken), std::string::npos) << text;
  EXPECT_EQ(text.find(kWrongToken), std::string::npos) << text;
}

TEST(RendezvousStrangers, WrongTokenIsRefusedAndLoggedAndTheJobCompletes) {
  const int port = free_port();
  Lines lines;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 2);
    s.log = lines.sink();
    root = rendezvous_broadcast(s, "payload");
  });
  // A rank of another job (or with a mistyped token): told at once, not at its timeout.
  RendezvousSpec wrong = spec_for(port, 1, 2, milliseconds(5000));
  wrong.job_token = kWrongToken;
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> stranger = rendezvous_broadcast(wrong, "");
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kFailedPrecondition) << message(stranger.status());
  EXPECT_NE(message(stranger.status()).find("refused: a wrong job token"), std::string::npos)
      << message(stranger.status());
  expect_no_token(message(stranger.status()));

  absl::StatusOr<std::string> good = rendezvous_broadcast(spec_for(port, 1, 2), "");
  root_thread.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(good.ok()) << message(good.status());
  EXPECT_EQ(*good, "payload");
  ASSERT_EQ(lines.all().size(), 1u) << lines.joined();
  const std::string line = lines.all()[0];
  EXPECT_NE(line.find("rendezvous: rank 0 on 127.0.0.1:" + std::to_string(port) + " refused 127.0.0.1:"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("a wrong job token"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  expect_no_token(line);
}

TEST(RendezvousStrangers, SilentConnectionStallsNothingAndIsDroppedAfterItsWindow) {
  const int port = free_port();
  Lines lines;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 3);
    s.hello_window = milliseconds(300);
    s.log = lines.sink();
    root = rendezvous_broadcast(s, "p");
  });
  const int silent = connect_when_listening("127.0.0.1", port);
  ASSERT_GE(silent, 0);
  // Rank 1 comes while the stranger holds its connection open and says nothing.
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> rank2 = absl::UnknownError("not run");
  std::thread rank2_thread([&] {
    std::this_thread::sleep_for(milliseconds(600));  // past the stranger's window
    rank2 = rendezvous_broadcast(spec_for(port, 2, 3), "");
  });
  absl::StatusOr<std::string> rank1 = rendezvous_broadcast(spec_for(port, 1, 3), "");
  rank2_thread.join();
  root_thread.join();
  const auto took = Clock::now() - start;
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(rank1.ok()) << message(rank1.status());
  ASSERT_TRUE(rank2.ok()) << message(rank2.status());
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_EQ(lines.count("sent nothing within 0.3 s"), 1) << lines.joined();
  // Rank 0 closed it: the stranger reads the end of the stream, no bytes.
  EXPECT_EQ(read_until_closed(silent, milliseconds(2000)), "");
  ::close(silent);
}

TEST(RendezvousStrangers, GarbageOfEveryKindIsRefusedAndLogged) {
  struct Case {
    std::string bytes;
    std::string reason;  // in rank 0's line
    bool told = false;   // the stranger gets a refusal reply
  };
  std::string padded_junk = hello_header(rendezvous_wire::kVersion, 4) + "abcd";
  padded_junk.resize(rendezvous_wire::kHelloSize, 'x');
  const std::vector<Case> cases = {
      {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a rendezvous hello"},
      {std::string(16, '\xff'), "not a rendezvous hello"},
      {"CPR", "closed the connection after 3 of the 276 bytes of a hello"},
      {"", "closed the connection without sending anything"},
      {hello_header(1, 0), "speaks rendezvous version 1, this build speaks 2", true},
      {padded_junk, "a malformed hello (bytes after its token)"},
  };
  const int port = free_port();
  Lines lines;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 2);
    s.log = lines.sink();
    root = rendezvous_broadcast(s, "still here");
  });
  for (size_t i = 0; i < cases.size(); ++i) {
    const int fd = connect_when_listening("127.0.0.1", port);
    ASSERT_GE(fd, 0);
    if (!cases[i].bytes.empty()) (void)::send(fd, cases[i].bytes.data(), cases[i].bytes.size(), MSG_NOSIGNAL);
    if (cases[i].bytes.size() < 8) ::shutdown(fd, SHUT_WR);  // too short to judge: end it
    const std::string answer = read_until_closed(fd, milliseconds(3000));
    ::close(fd);
    ASSERT_TRUE(lines.wait_for(i + 1)) << "case " << i << ": no line\n" << lines.joined();
    EXPECT_NE(lines.all()[i].find(cases[i].reason), std::string::npos) << "case " << i << "\n" << lines.joined();
    if (cases[i].told) {
      ASSERT_GE(answer.size(), rendezvous_wire::kReplyHeaderSize) << "case " << i;
      const rendezvous_wire::ReplyHeader h = rendezvous_wire::decode_reply_header(answer);
      EXPECT_TRUE(h.magic_ok);
      EXPECT_EQ(h.status, 1u);
      EXPECT_NE(answer.find(cases[i].reason), std::string::npos) << answer;
    } else {
      EXPECT_EQ(answer, "") << "case " << i;
    }
  }
  absl::StatusOr<std::string> good = rendezvous_broadcast(spec_for(port, 1, 2), "");
  root_thread.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(good.ok()) << message(good.status());
  EXPECT_EQ(*good, "still here");
  EXPECT_EQ(lines.all().size(), cases.size()) << lines.joined();
  for (const std::string& l : lines.all()) expect_no_token(l);
}

TEST(RendezvousStrangers, OversizedHelloIsRefusedAfterOneHellosBytes) {
  const int port = free_port();
  Lines lines;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 2);
    s.log = lines.sink();
    root = rendezvous_broadcast(s, "p");
  });
  // A hello announcing a 100000-byte token, then 4 MiB: rank 0 must not read
  // (or buffer) beyond a hello's size before refusing it.
  const int fd = connect_when_listening("127.0.0.1", port);
  ASSERT_GE(fd, 0);
  const std::string big = hello_header(rendezvous_wire::kVersion, 100000) + std::string(4 << 20, 'A');
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  size_t sent = 0;
  const Clock::time_point until = Clock::now() + std::chrono::seconds(3);
  while (sent < big.size() && Clock::now() < until) {
    const ssize_t n = ::send(fd, big.data() + sent, big.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::this_thread::sleep_for(milliseconds(5));
    } else {
      break;  // refused and closed under us: expected
    }
  }
  EXPECT_LT(sent, big.size()) << "rank 0 took all of a 4 MiB 'hello'";
  ::close(fd);
  ASSERT_TRUE(lines.wait_for(1)) << lines.joined();
  EXPECT_EQ(lines.count("a malformed hello (a token of 100000 bytes, more than 256)"), 1) << lines.joined();
  absl::StatusOr<std::string> good = rendezvous_broadcast(spec_for(port, 1, 2), "");
  root_thread.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(good.ok()) << message(good.status());
}

TEST(RendezvousStrangers, FloodOfSilentConnectionsKeepsNoRankOutAndTheLogShort) {
  const int port = free_port();
  Lines lines;
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 2);
    s.log = lines.sink();
    root = rendezvous_broadcast(s, "p");
  });
  std::vector<int> flood;
  const int first = connect_when_listening("127.0.0.1", port);
  ASSERT_GE(first, 0);
  flood.push_back(first);
  for (int i = 0; i < 150; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const sockaddr_in addr = loopback("127.0.0.1", port);
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    flood.push_back(fd);
  }
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> good = rendezvous_broadcast(spec_for(port, 1, 2), "");
  root_thread.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(good.ok()) << message(good.status());
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  // The oldest were dropped for newer ones; 20 lines, then one saying the rest are counted.
  EXPECT_LE(lines.all().size(), 21u) << lines.joined();
  EXPECT_GE(lines.count("connections were waiting to say hello"), 1) << lines.joined();
  if (lines.all().size() == 21u) { EXPECT_EQ(lines.count("counting the rest without a line each"), 1); }
  for (int fd : flood) ::close(fd);
}

TEST(RendezvousStrangers, RootsShortTimeoutEndsInAboutItsTimeDespiteASilentStranger) {
  const int port = free_port();
  Lines lines;
  std::atomic<bool> done{false};
  std::thread stranger([&] {
    const int fd = connect_when_listening("127.0.0.1", port);
    while (!done) std::this_thread::sleep_for(milliseconds(10));
    if (fd >= 0) ::close(fd);
  });
  RendezvousSpec s = spec_for(port, 0, 2, milliseconds(600));
  s.log = lines.sink();
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> root = rendezvous_broadcast(s, "p");
  const auto took = Clock::now() - start;
  done = true;
  stranger.join();
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(message(root.status()).find("rank 1 did not connect within 0.6 s"), std::string::npos)
      << message(root.status());
  EXPECT_GE(took, milliseconds(550));
  EXPECT_LT(took, milliseconds(2000));
}

TEST(RendezvousStrangers, RanksShortTimeoutEndsInAboutItsTimeWhenRankZeroSaysNothing) {
  const int port = free_port();
  // Something listens and accepts but never answers.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in addr = loopback("127.0.0.1", port);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> got = rendezvous_broadcast(spec_for(port, 1, 2, milliseconds(600)), "");
  const auto took = Clock::now() - start;
  ::close(lfd);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << message(got.status());
  EXPECT_NE(message(got.status()).find("did not send the payload within 0.6 s"), std::string::npos)
      << message(got.status());
  EXPECT_LT(took, milliseconds(2000));
}

// ---- where rank 0 listens ----

TEST(RendezvousBind, ListensOnMasterAddrAloneNotOnAnotherLoopbackAddress) {
  for (const char* ip : {"127.0.0.1", "127.0.0.2"}) {
    const char* other = std::string(ip) == "127.0.0.1" ? "127.0.0.2" : "127.0.0.1";
    const int port = free_port();
    Lines lines;
    absl::StatusOr<std::string> root = absl::UnknownError("not run");
    std::thread root_thread([&] {
      RendezvousSpec s = spec_for(port, 0, 2);
      s.master_addr = ip;
      s.log = lines.sink();
      root = rendezvous_broadcast(s, "p");
    });
    const int probe = connect_when_listening(ip, port);  // rank 0 is listening now
    ASSERT_GE(probe, 0) << ip;
    ::close(probe);
    EXPECT_EQ(connect_errno(other, port), ECONNREFUSED) << "rank 0 on " << ip << " is reachable on " << other;
    RendezvousSpec peer = spec_for(port, 1, 2);
    peer.master_addr = ip;
    absl::StatusOr<std::string> good = rendezvous_broadcast(peer, "");
    root_thread.join();
    ASSERT_TRUE(root.ok()) << ip << ": " << message(root.status());
    ASSERT_TRUE(good.ok()) << ip << ": " << message(good.status());
  }
}

TEST(RendezvousBind, AllInterfacesOnRequest) {
  const int port = free_port();
  absl::StatusOr<std::string> root = absl::UnknownError("not run");
  std::thread root_thread([&] {
    RendezvousSpec s = spec_for(port, 0, 2);
    s.bind_all_interfaces = true;
    s.log = [](const std::string&) {};
    root = rendezvous_broadcast(s, "p");
  });
  RendezvousSpec peer = spec_for(port, 1, 2);
  peer.master_addr = "127.0.0.2";
  absl::StatusOr<std::string> good = rendezvous_broadcast(peer, "");
  root_thread.join();
  ASSERT_TRUE(root.ok()) << message(root.status());
  ASSERT_TRUE(good.ok()) << message(good.status());
}

TEST(RendezvousBind, UnusableMasterAddrFailsAtOnceSayingWhy) {
  struct Case {
    std::string addr;
    bool others_elsewhere;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"192.0.2.1", false, "192.0.2.1 is not an address of this machine"},  // TEST-NET-1
      {"0.0.0.0", false, "set COPPICE_RENDEZVOUS_BIND=any to listen on every interface on purpose"},
      {"127.0.0.1", true, "resolves here to 127.0.0.1, a loopback address that ranks on other machines cannot reach"},
      {"localhost", true, "resolves here to 127.0.0.1, a loopback address that ranks on other machines cannot reach"},
  };
  for (const Case& c : cases) {
    RendezvousSpec s = spec_for(free_port(), 0, 2, milliseconds(5000));
    s.master_addr = c.addr;
    s.ranks_on_other_machines = c.others_elsewhere;
    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::string> got = rendezvous_broadcast(s, "p");
    ASSERT_FALSE(got.ok()) << c.addr;
    EXPECT_NE(message(got.status()).find("could not listen on " + c.addr + ":"), std::string::npos)
        << message(got.status());
    EXPECT_NE(message(got.status()).find(c.expect), std::string::npos) << message(got.status());
    EXPECT_LT(Clock::now() - start, milliseconds(1000)) << c.addr;
  }
}

// In a network namespace of our own (root only): 10.77.0.1 on its loopback
// device, not a loopback address, so rank 0 takes it even when ranks are
// said to be elsewhere; 127.0.0.1 of the same namespace does not reach it.
TEST(RendezvousBind, NonLoopbackAddressInANetworkNamespace) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // 77: cannot set up (skip); 0: passed; anything else: a failure.
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(77);
    if (std::system("ip link set lo up && ip addr add 10.77.0.1/32 dev lo") != 0) ::_exit(77);
    const int port = 29517;
    absl::StatusOr<std::string> root = absl::UnknownError("not run");
    std::thread root_thread([&] {
      RendezvousSpec s = spec_for(port, 0, 2);
      s.master_addr = "10.77.0.1";
      s.ranks_on_other_machines = true;
      s.log = [](const std::string&) {};
      root = rendezvous_broadcast(s, "p");
    });
    const int probe = connect_when_listening("10.77.0.1", port);
    const int refused = connect_errno("127.0.0.1", port);
    if (probe >= 0) ::close(probe);
    RendezvousSpec peer = spec_for(port, 1, 2);
    peer.master_addr = "10.77.0.1";
    absl::StatusOr<std::string> good = rendezvous_broadcast(peer, "");
    root_thread.join();
    if (probe < 0) ::_exit(10);
    if (refused != ECONNREFUSED) ::_exit(11);
    if (!root.ok() || !good.ok()) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the namespace child died: status " << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot make a network namespace here (needs root and ip)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: not reachable on 10.77.0.1; 11: reachable on 127.0.0.1; 12: failed";
}

}  // namespace
}  // namespace coppice
