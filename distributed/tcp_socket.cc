#include "distributed/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "tensor/error.h"

namespace coppice {
namespace tcp {
namespace {

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

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

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

std::string recv_exact(int fd, size_t size, std::string* out, Clock::time_point deadline, size_t* got_out) {
  out->assign(size, '\0');
  size_t got = 0;
  auto result = [&](std::string what) {
    if (got_out != nullptr) *got_out = got;
    return what;
  };
  while (got < size) {
    const ssize_t n = ::recv(fd, &(*out)[got], size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return result("the connection closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int err = 0;
      if (!wait_for(fd, POLLIN, deadline, &err)) return result("timed out while receiving");
      if (err != 0) return result(errno_text(err));
      continue;
    }
    return result(errno_text(errno));
  }
  return result("");
}

std::string ip_text(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return buf;
}

std::string address_text(const sockaddr_in& addr) { return str_cat(ip_text(addr), ":", ntohs(addr.sin_port)); }

std::string address_text(const sockaddr_storage& addr) {
  if (addr.ss_family != AF_INET) return "?";
  return address_text(*reinterpret_cast<const sockaddr_in*>(&addr));
}

bool is_loopback(const sockaddr_in& addr) { return (ntohl(addr.sin_addr.s_addr) >> 24) == 127; }

bool is_ipv4_literal(const std::string& host) {
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1;
}

std::vector<sockaddr_in> resolve(const std::string& host, int port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
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

}  // namespace tcp
}  // namespace coppice
