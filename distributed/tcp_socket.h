// Small pieces of non-blocking IPv4 TCP for the rendezvous
// (distributed/tcp_rendezvous.cc): an owning descriptor, name resolution,
// connect, and send/receive bounded by a deadline. Errors come back as short
// lower-case texts ("connection refused") for the caller's one-line message.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

namespace coppice {
namespace tcp {

using Clock = std::chrono::steady_clock;

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset();

 private:
  int fd_ = -1;
};

// strerror(err), starting in lower case.
std::string errno_text(int err);

bool set_nonblocking(int fd);

// Milliseconds until `deadline`, clamped to [0, 2^30].
int remaining_ms(Clock::time_point deadline);

// Writes all of `data` before `deadline`; returns "" or what went wrong.
std::string send_all(int fd, const std::string& data, Clock::time_point deadline);

// Reads exactly `size` bytes before `deadline` into *out; returns "" or what
// went wrong ("the connection closed", "timed out while receiving", an errno
// text). *got, when given, is how many bytes arrived.
std::string recv_exact(int fd, size_t size, std::string* out, Clock::time_point deadline, size_t* got = nullptr);

// "a.b.c.d" of an IPv4 socket address.
std::string ip_text(const sockaddr_in& addr);

// "a.b.c.d:port" of an IPv4 socket address ("?" for another family).
std::string address_text(const sockaddr_storage& addr);
std::string address_text(const sockaddr_in& addr);

// Whether `addr` is in 127.0.0.0/8.
bool is_loopback(const sockaddr_in& addr);

// Whether `host` is written as a dotted IPv4 address (no lookup needed).
bool is_ipv4_literal(const std::string& host);

// The IPv4 addresses of host:port, or none with *error set.
std::vector<sockaddr_in> resolve(const std::string& host, int port, std::string* error);

// One attempt to connect to `addr` before `deadline`: a non-blocking socket,
// or an invalid Fd with *error set.
Fd try_connect(const sockaddr_in& addr, Clock::time_point deadline, std::string* error);

}  // namespace tcp
}  // namespace coppice
