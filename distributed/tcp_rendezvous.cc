#include "distributed/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "tensor/error.h"

namespace coppice {
namespace {

using Clock = std::chrono::steady_clock;

// Wire format (big-endian). A peer's hello: magic, version, rank, world size.
// Rank 0's answer: magic, status (0 ok, else the payload is an error text),
// payload length (u64), payload.
constexpr uint32_t kHelloMagic = 0x43505256;  // "CPRV"
constexpr uint32_t kReplyMagic = 0x43505250;  // "CPRP"
constexpr uint32_t kVersion = 1;
constexpr size_t kHelloSize = 16;
constexpr size_t kReplyHeaderSize = 16;
constexpr uint64_t kMaxPayload = uint64_t{1} << 20;

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return str_cat(d.count() / 1000, " s");
  return str_cat(d.count() / 1000.0, " s");
}

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

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

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// poll() on one descriptor until `events` or the deadline; false on timeout.
// Sets *err to errno on a poll failure (other than EINTR).
bool wait_for(int fd, short events, Clock::time_point deadline, int* err) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) {
      *err = errno;
      return true;
    }
  }
}

// Writes all of `data`; returns "" or what went wrong.
std::string send_all(int fd, const std::string& data, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int err = 0;
      if (!wait_for(fd, POLLOUT, deadline, &err)) return "timed out while sending";
      if (err != 0) return errno_text(err);
      continue;
    }
    return n < 0 ? errno_text(errno) : "the connection closed";
  }
  return "";
}

// Reads exactly `size` bytes; returns "" or what went wrong.
std::string recv_exact(int fd, size_t size, std::string* out, Clock::time_point deadline) {
  out->assign(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, &(*out)[got], size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return "the connection closed";
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int err = 0;
      if (!wait_for(fd, POLLIN, deadline, &err)) return "timed out while receiving";
      if (err != 0) return errno_text(err);
      continue;
    }
    return errno_text(errno);
  }
  return "";
}

std::string reply(uint32_t status, const std::string& body) {
  std::string out;
  put_u32(out, kReplyMagic);
  put_u32(out, status);
  put_u64(out, body.size());
  out += body;
  return out;
}

std::string peer_text(const sockaddr_storage& addr) {
  if (addr.ss_family != AF_INET) return "?";
  const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
  return str_cat(buf, ":", ntohs(in->sin_port));
}

// IPv4 addresses of host:port; sets *error on failure.
std::vector<sockaddr_in> resolve(const std::string& host, int port, bool passive, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  std::vector<sockaddr_in> out;
  if (rc != 0) {
    *error = rc == EAI_SYSTEM ? errno_text(errno) : std::string(::gai_strerror(rc));
    return out;
  }
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && a->ai_addrlen >= sizeof(sockaddr_in)) {
      out.push_back(*reinterpret_cast<const sockaddr_in*>(a->ai_addr));
    }
  }
  ::freeaddrinfo(res);
  if (out.empty()) *error = "no IPv4 address";
  return out;
}

std::string endpoint(const RendezvousSpec& spec) { return str_cat(spec.master_addr, ":", spec.master_port); }

// ---- rank 0 ----

struct Peer {
  Fd fd;
  std::string addr;  // ip:port of the peer
  std::string buf;   // hello bytes read so far
  int rank = -1;     // once its hello checked out
};

absl::StatusOr<std::string> serve(const RendezvousSpec& spec, const std::string& payload) {
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  const std::string where = endpoint(spec);
  auto failure = [&](const std::string& what) {
    return absl::UnavailableError(str_cat("rendezvous: rank 0 could not listen on ", where, ": ", what));
  };

  // Every interface: the master address is how the others reach us, and may
  // resolve here to an address (127.0.1.1, say) that only we can reach.
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = htons(static_cast<uint16_t>(spec.master_port));
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return failure(errno_text(errno));
  const int one = 1;
  // A job restarted on the same port must not wait out TIME_WAIT.
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&any), sizeof(any)) != 0) {
    return failure(errno_text(errno));
  }
  if (::listen(listener.get(), std::max(16, spec.world_size)) != 0 || !set_nonblocking(listener.get())) {
    return failure(errno_text(errno));
  }

  std::vector<Peer> peers;        // connections, valid or not yet read
  std::map<int, size_t> by_rank;  // rank -> index in peers
  int dropped = 0;                // connections that sent no valid hello
  std::string error;

  // Tells every connected, checked peer why the rendezvous failed (best
  // effort, so that they fail now and not at their timeout) and returns it.
  auto abort_all = [&](const std::string& what) {
    const Clock::time_point soon = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
    for (Peer& p : peers) {
      if (p.fd.valid()) send_all(p.fd.get(), reply(1, what), soon);
    }
    return absl::FailedPreconditionError(what);
  };

  while (static_cast<int>(by_rank.size()) < spec.world_size - 1) {
    std::vector<pollfd> fds;
    fds.push_back({listener.get(), POLLIN, 0});
    std::vector<size_t> which;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (peers[i].fd.valid() && peers[i].rank < 0) {
        fds.push_back({peers[i].fd.get(), POLLIN, 0});
        which.push_back(i);
      }
    }
    const int ms = remaining_ms(deadline);
    if (ms <= 0) {
      std::vector<int> missing;
      for (int r = 1; r < spec.world_size; ++r) {
        if (by_rank.count(r) == 0) missing.push_back(r);
      }
      std::string what = str_cat("rendezvous: rank 0 on ", where, ": ", missing.size() == 1 ? "rank " : "ranks ",
                                 str_join(missing, ", "), " did not connect within ", seconds_text(spec.timeout));
      if (dropped > 0) what += str_cat(" (dropped ", dropped, " connection(s) that sent no valid hello)");
      return absl::DeadlineExceededError(abort_all(what).message());
    }
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return abort_all(str_cat("rendezvous: rank 0 on ", where, ": poll failed: ", errno_text(errno)));
    }
    if (n == 0) continue;

    if (fds[0].revents & POLLIN) {
      for (;;) {
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        const int fd = ::accept(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len);
        if (fd < 0) break;  // EAGAIN: none left; anything else: the peer gave up, ignore
        Peer p;
        p.fd = Fd(fd);
        p.addr = peer_text(addr);
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        if (!set_nonblocking(fd)) continue;
        peers.push_back(std::move(p));
      }
    }

    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Peer& p = peers[which[k - 1]];
      char buf[kHelloSize];
      const ssize_t got = ::recv(p.fd.get(), buf, kHelloSize - p.buf.size(), 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (got <= 0) {  // closed or reset before saying hello
        p.fd.reset();
        ++dropped;
        continue;
      }
      p.buf.append(buf, static_cast<size_t>(got));
      if (p.buf.size() < kHelloSize) continue;
      if (get_u32(p.buf.data()) != kHelloMagic || get_u32(p.buf.data() + 4) != kVersion) {
        p.fd.reset();  // not one of ours: drop it, the real peers may still come
        ++dropped;
        continue;
      }
      const int rank = static_cast<int>(get_u32(p.buf.data() + 8));
      const int world = static_cast<int>(get_u32(p.buf.data() + 12));
      if (world != spec.world_size) {
        return abort_all(str_cat("rendezvous: rank 0 on ", where, ": the peer at ", p.addr, " (rank ", rank,
                                 ") has world size ", world, ", rank 0 has ", spec.world_size));
      }
      if (rank <= 0 || rank >= spec.world_size) {
        return abort_all(str_cat("rendezvous: rank 0 on ", where, ": the peer at ", p.addr, " says it is rank ", rank,
                                 ", which is not a non-root rank of a world of size ", spec.world_size));
      }
      auto seen = by_rank.find(rank);
      if (seen != by_rank.end()) {
        return abort_all(str_cat("rendezvous: rank 0 on ", where, ": rank ", rank, " connected twice (from ",
                                 peers[seen->second].addr, " and from ", p.addr, ")"));
      }
      p.rank = rank;
      by_rank[rank] = which[k - 1];
    }
  }

  const std::string message = reply(0, payload);
  for (const auto& [rank, index] : by_rank) {
    const std::string sent = send_all(peers[index].fd.get(), message, deadline);
    if (!sent.empty()) {
      return abort_all(str_cat("rendezvous: rank 0 on ", where, ": could not send the payload to rank ", rank, " at ",
                               peers[index].addr, ": ", sent));
    }
  }
  return payload;
}

// ---- ranks 1.. ----

// One attempt to connect to `addr` before `deadline`; returns the socket or
// sets *error (errno text).
Fd try_connect(const sockaddr_in& addr, Clock::time_point deadline, std::string* error) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() || !set_nonblocking(fd.get())) {
    *error = errno_text(errno);
    return Fd();
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (errno != EINPROGRESS) {
    *error = errno_text(errno);
    return Fd();
  }
  int err = 0;
  if (!wait_for(fd.get(), POLLOUT, deadline, &err)) {
    *error = "connection timed out";
    return Fd();
  }
  if (err == 0) {
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  }
  if (err != 0) {
    *error = errno_text(err);
    return Fd();
  }
  return fd;
}

absl::StatusOr<std::string> join(const RendezvousSpec& spec) {
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  const std::string where = endpoint(spec);
  const std::string who = str_cat("rendezvous: rank ", spec.rank);

  // Connect, retrying while rank 0 is not listening yet (refused) or the
  // name does not resolve for a moment.
  Fd fd;
  std::string last_error = "no attempt was made";
  while (!fd.valid()) {
    std::string error;
    std::vector<sockaddr_in> addrs = resolve(spec.master_addr, spec.master_port, false, &error);
    if (addrs.empty()) { last_error = str_cat("cannot resolve '", spec.master_addr, "': ", error); }
    for (const sockaddr_in& a : addrs) {
      const Clock::time_point attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(2));
      fd = try_connect(a, attempt_deadline, &error);
      if (fd.valid()) break;
      last_error = error;
    }
    if (fd.valid()) break;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          str_cat(who, " could not reach ", where, " within ", seconds_text(spec.timeout), ": ", last_error));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(
        std::chrono::milliseconds(100), std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero())));
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  std::string hello;
  put_u32(hello, kHelloMagic);
  put_u32(hello, kVersion);
  put_u32(hello, static_cast<uint32_t>(spec.rank));
  put_u32(hello, static_cast<uint32_t>(spec.world_size));
  if (std::string e = send_all(fd.get(), hello, deadline); !e.empty()) {
    return absl::UnavailableError(str_cat(who, " could not send its hello to ", where, ": ", e));
  }

  std::string header;
  if (std::string e = recv_exact(fd.get(), kReplyHeaderSize, &header, deadline); !e.empty()) {
    if (e == "timed out while receiving") {
      return absl::DeadlineExceededError(str_cat(who, ": rank 0 at ", where, " did not send the payload within ",
                                                 seconds_text(spec.timeout), " (are all ranks started?)"));
    }
    return absl::UnavailableError(str_cat(who, " connected to ", where, " but got no answer: ", e));
  }
  if (get_u32(header.data()) != kReplyMagic) {
    return absl::DataLossError(str_cat(who, ": ", where,
                                       " answered with bytes that are not a rendezvous reply "
                                       "(another service on that port?)"));
  }
  const uint32_t status = get_u32(header.data() + 4);
  const uint64_t length = get_u64(header.data() + 8);
  if (length > kMaxPayload) {
    return absl::DataLossError(
        str_cat(who, ": ", where, " announced a payload of ", length, " bytes, more than the limit of ", kMaxPayload));
  }
  std::string body;
  if (std::string e = recv_exact(fd.get(), static_cast<size_t>(length), &body, deadline); !e.empty()) {
    return absl::UnavailableError(str_cat(who, ": the payload from ", where, " was cut short: ", e));
  }
  if (status != 0) { return absl::FailedPreconditionError(str_cat(who, ": rank 0 at ", where, " refused: ", body)); }
  return body;
}

}  // namespace

absl::StatusOr<std::string> rendezvous_broadcast(const RendezvousSpec& spec, const std::string& payload_from_root) {
  if (spec.world_size < 1 || spec.rank < 0 || spec.rank >= spec.world_size) {
    return absl::InvalidArgumentError(
        str_cat("rendezvous: rank ", spec.rank, " is not a rank of a world of size ", spec.world_size));
  }
  if (spec.timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        str_cat("rendezvous: the timeout must be > 0, got ", spec.timeout.count(), " ms"));
  }
  if (spec.rank == 0 && payload_from_root.size() > kMaxPayload) {
    return absl::InvalidArgumentError(str_cat("rendezvous: the payload has ", payload_from_root.size(),
                                              " bytes, more than the limit of ", kMaxPayload));
  }
  if (spec.world_size == 1) return payload_from_root;
  if (spec.master_port <= 0 || spec.master_port > 65535) {
    return absl::InvalidArgumentError(
        str_cat("rendezvous: rank ", spec.rank, ": master port ", spec.master_port, " is not in 1..65535"));
  }
  if (spec.master_addr.empty()) {
    return absl::InvalidArgumentError(str_cat("rendezvous: rank ", spec.rank, ": no master address"));
  }
  return spec.rank == 0 ? serve(spec, payload_from_root) : join(spec);
}

absl::StatusOr<int> pick_free_tcp_port(const std::string& host) {
  std::string error;
  std::vector<sockaddr_in> addrs = resolve(host, 0, false, &error);
  if (addrs.empty()) return absl::UnavailableError(str_cat("pick_free_tcp_port: cannot resolve '", host, "': ", error));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = addrs[0];
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(str_cat("pick_free_tcp_port: ", errno_text(errno)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace coppice
