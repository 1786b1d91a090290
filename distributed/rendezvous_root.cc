#include "distributed/rendezvous_root.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <iostream>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "distributed/rendezvous_wire.h"
#include "distributed/tcp_socket.h"
#include "tensor/error.h"

namespace coppice {
namespace {

namespace wire = rendezvous_wire;
using tcp::Clock;
using tcp::Fd;

// Connections waiting for their hello at one time: enough for every rank of
// a large job arriving at once (a rank leaves the queue as soon as its hello
// is read), few enough that a flood of strangers cannot exhaust descriptors.
constexpr size_t kMaxWaiting = 64;
// Refusals reported one line each; past this they are only counted, so that
// a flood cannot fill the log.
constexpr int kMaxLoggedRefusals = 20;

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return str_cat(d.count() / 1000, " s");
  return str_cat(d.count() / 1000.0, " s");
}

// A connection that has not yet sent a whole hello.
struct Waiting {
  Fd fd;
  std::string peer;   // ip:port
  std::string bytes;  // what it sent so far, at most kHelloSize
  Clock::time_point hello_by;
};

// A rank whose hello checked out.
struct Joined {
  Fd fd;
  std::string peer;
};

class Root {
 public:
  explicit Root(const RendezvousSpec& spec)
      : spec_(spec), deadline_(Clock::now() + spec.timeout), where_(str_cat(spec.master_addr, ":", spec.master_port)) {}

  absl::StatusOr<std::string> run(const std::string& payload) {
    if (absl::Status st = listen(); !st.ok()) return st;
    while (static_cast<int>(joined_.size()) < spec_.world_size - 1) {
      if (Clock::now() >= deadline_) return absl::DeadlineExceededError(abort_all(timeout_text()).message());
      drop_expired();
      if (absl::Status st = serve_once(); !st.ok()) return st;
    }
    const std::string message = wire::encode_reply(0, payload);
    for (const auto& [rank, j] : joined_) {
      const std::string sent = tcp::send_all(j.fd.get(), message, deadline_);
      if (!sent.empty()) {
        return abort_all(str_cat("rendezvous: rank 0 on ", where_, ": could not send the payload to rank ", rank,
                                 " at ", j.peer, ": ", sent));
      }
    }
    return payload;
  }

 private:
  // Binds to master_addr's address (or every interface when asked) and listens.
  absl::Status listen() {
    auto failure = [&](const std::string& what) {
      return absl::UnavailableError(str_cat("rendezvous: rank 0 could not listen on ", where_, ": ", what));
    };
    std::vector<sockaddr_in> candidates;
    if (spec_.bind_all_interfaces) {
      sockaddr_in any{};
      any.sin_family = AF_INET;
      any.sin_addr.s_addr = htonl(INADDR_ANY);
      any.sin_port = htons(static_cast<uint16_t>(spec_.master_port));
      candidates.push_back(any);
    } else {
      std::string error;
      candidates = tcp::resolve(spec_.master_addr, spec_.master_port, &error);
      if (candidates.empty()) return failure(str_cat("cannot resolve '", spec_.master_addr, "': ", error));
      for (const sockaddr_in& a : candidates) {
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
          return failure(
              str_cat("'", spec_.master_addr,
                      "' is every interface, not an address the other ranks can connect to; name rank 0's "
                      "address, or set COPPICE_RENDEZVOUS_BIND=any to listen on every interface on purpose"));
        }
      }
      if (spec_.ranks_on_other_machines) {
        const sockaddr_in first = candidates[0];
        candidates.erase(std::remove_if(candidates.begin(), candidates.end(), tcp::is_loopback), candidates.end());
        if (candidates.empty()) {
          return failure(str_cat("'", spec_.master_addr, "' resolves here to ", tcp::ip_text(first),
                                 ", a loopback address that ranks on other machines cannot reach; set MASTER_ADDR to "
                                 "this machine's address on the network the ranks share, or "
                                 "COPPICE_RENDEZVOUS_BIND=any to listen on every interface"));
        }
      }
    }
    std::string last_error = "no address to bind";
    for (const sockaddr_in& a : candidates) {
      Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!fd.valid()) return failure(tcp::errno_text(errno));
      const int one = 1;
      // A job restarted on the same port must not wait out TIME_WAIT.
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
        const int err = errno;
        last_error =
            err == EADDRNOTAVAIL
                ? str_cat(tcp::ip_text(a),
                          " is not an address of this machine (is rank 0 running on MASTER_ADDR's host? behind "
                          "NAT, COPPICE_RENDEZVOUS_BIND=any listens on every interface)")
                : tcp::errno_text(err);
        continue;
      }
      // A backlog with room for a burst of strangers beside the ranks.
      if (::listen(fd.get(), std::max(128, std::min(spec_.world_size, 4096))) != 0 || !tcp::set_nonblocking(fd.get())) {
        return failure(tcp::errno_text(errno));
      }
      listener_ = std::move(fd);
      bound_ = a;
      return absl::OkStatus();
    }
    return failure(last_error);
  }

  // One poll over the listener and the waiting connections, and what it found.
  absl::Status serve_once() {
    std::vector<pollfd> fds;
    const Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({listener_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    Clock::time_point wake = accepting ? deadline_ : std::min(deadline_, accept_paused_until_);
    for (const Waiting& w : waiting_) {
      fds.push_back({w.fd.get(), POLLIN, 0});
      wake = std::min(wake, w.hello_by);
    }
    const int n = ::poll(fds.data(), fds.size(), tcp::remaining_ms(wake));
    if (n < 0) {
      if (errno == EINTR) return absl::OkStatus();
      return abort_all(str_cat("rendezvous: rank 0 on ", where_, ": poll failed: ", tcp::errno_text(errno)));
    }
    if (n == 0) return absl::OkStatus();
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents != 0) read_hello(waiting_[k - 1]);
      if (!failure_.empty()) return abort_all(failure_);
    }
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [](const Waiting& w) { return !w.fd.valid(); }),
                   waiting_.end());
    if (fds[0].revents & POLLIN) accept_some();
    return absl::OkStatus();
  }

  // Accepts what the backlog holds, up to kMaxWaiting per round (so that a
  // flood cannot keep us from reading the hellos already here).
  void accept_some() {
    for (size_t round = 0; round < kMaxWaiting; ++round) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;  // a peer that gave up: the next one
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          if (!waiting_.empty()) {
            drop_oldest("dropped to free a descriptor for a newer connection (this process has no more)");
            continue;
          }
          accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);  // no busy loop
        }
        return;  // EAGAIN: none left
      }
      waiting_.push_back(Waiting{Fd(fd), tcp::address_text(addr), {}, Clock::now() + spec_.hello_window});
      if (waiting_.size() > kMaxWaiting) {
        drop_oldest(str_cat("dropped: more than ", kMaxWaiting, " connections were waiting to say hello"));
      }
    }
  }

  // Reads what `w` has sent, at most up to a whole hello, and judges it.
  void read_hello(Waiting& w) {
    char buf[wire::kHelloSize];
    const size_t had = w.bytes.size();
    const ssize_t got = ::recv(w.fd.get(), buf, wire::kHelloSize - had, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got < 0) {
      refuse(w, str_cat("its connection failed after ", had, " bytes: ", tcp::errno_text(errno)));
      return;
    }
    if (got == 0) {
      refuse(w, had == 0
                    ? std::string("closed the connection without sending anything")
                    : str_cat("closed the connection after ", had, " of the ", wire::kHelloSize, " bytes of a hello"));
      return;
    }
    w.bytes.append(buf, static_cast<size_t>(got));
    const wire::HelloVerdict v = wire::check_hello(w.bytes, spec_.job_token);
    switch (v.kind) {
      case wire::HelloVerdict::Kind::kIncomplete: return;
      case wire::HelloVerdict::Kind::kRefused: refuse(w, v.reason, v.tell_peer); return;
      case wire::HelloVerdict::Kind::kAccepted: admit(w, v); return;
    }
  }

  // A hello with the job's token: a rank of this job. One that contradicts
  // the others fails the rendezvous (failure_), being a rank misstarted.
  void admit(Waiting& w, const wire::HelloVerdict& v) {
    const std::string prefix = str_cat("rendezvous: rank 0 on ", where_, ": ");
    if (v.world_size != spec_.world_size) {
      failure_ = str_cat(prefix, "the peer at ", w.peer, " (rank ", v.rank, ") has world size ", v.world_size,
                         ", rank 0 has ", spec_.world_size);
    } else if (v.rank <= 0 || v.rank >= spec_.world_size) {
      failure_ = str_cat(prefix, "the peer at ", w.peer, " says it is rank ", v.rank,
                         ", which is not a non-root rank of a world of size ", spec_.world_size);
    } else if (auto seen = joined_.find(static_cast<int>(v.rank)); seen != joined_.end()) {
      failure_ =
          str_cat(prefix, "rank ", v.rank, " connected twice (from ", seen->second.peer, " and from ", w.peer, ")");
    }
    if (!failure_.empty()) {
      misstarted_.push_back(std::move(w.fd));  // told why, with the others
      return;
    }
    joined_[static_cast<int>(v.rank)] = Joined{std::move(w.fd), w.peer};
  }

  void drop_expired() {
    const Clock::time_point now = Clock::now();
    for (Waiting& w : waiting_) {
      if (now < w.hello_by) continue;
      refuse(w, w.bytes.empty() ? str_cat("sent nothing within ", seconds_text(spec_.hello_window))
                                : str_cat("sent ", w.bytes.size(), " of the ", wire::kHelloSize,
                                          " bytes of a hello within ", seconds_text(spec_.hello_window)));
    }
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [](const Waiting& w) { return !w.fd.valid(); }),
                   waiting_.end());
  }

  void drop_oldest(const std::string& why) {
    refuse(waiting_.front(), why);
    waiting_.pop_front();
  }

  // Closes `w` and reports it. `tell_peer`: it speaks the protocol (a rank of
  // another job or build), so it gets a refusal reply and fails at once
  // instead of at its timeout. The reply is small and sent without waiting.
  void refuse(Waiting& w, const std::string& reason, bool tell_peer = false) {
    ++refused_;
    if (tell_peer) {
      const std::string reply = wire::encode_reply(1, reason);
      (void)::send(w.fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(w.fd.get(), SHUT_WR);
    }
    w.fd.reset();
    if (refused_ <= kMaxLoggedRefusals) {
      log(str_cat("rendezvous: rank 0 on ", where_, " refused ", w.peer, ": ", reason));
    } else if (refused_ == kMaxLoggedRefusals + 1) {
      log(str_cat("rendezvous: rank 0 on ", where_, ": more than ", kMaxLoggedRefusals,
                  " connections refused; counting the rest without a line each"));
    }
  }

  void log(const std::string& line) const {
    if (spec_.log) {
      spec_.log(line);
    } else {
      std::cerr << line << std::endl;
    }
  }

  std::string timeout_text() const {
    std::vector<int> missing;
    for (int r = 1; r < spec_.world_size; ++r) {
      if (joined_.count(r) == 0) missing.push_back(r);
    }
    std::string what = str_cat("rendezvous: rank 0 on ", where_, ": ", missing.size() == 1 ? "rank " : "ranks ",
                               str_join(missing, ", "), " did not connect within ", seconds_text(spec_.timeout));
    if (refused_ > 0)
      what += str_cat(" (", refused_, " other connection(s) refused, each reported on a line of its own)");
    if (!spec_.bind_all_interfaces && tcp::is_loopback(bound_) && !tcp::is_ipv4_literal(spec_.master_addr)) {
      what += str_cat("; '", spec_.master_addr, "' resolves here to ", tcp::ip_text(bound_),
                      ", a loopback address that ranks on other machines cannot reach (set MASTER_ADDR to this "
                      "machine's network address, or COPPICE_RENDEZVOUS_BIND=any)");
    }
    return what;
  }

  // Tells every rank that said hello why the rendezvous failed (best effort,
  // so that they fail now and not at their timeout) and returns the failure.
  absl::Status abort_all(const std::string& what) {
    const Clock::time_point soon = std::min(deadline_, Clock::now() + std::chrono::milliseconds(500));
    const std::string reply = wire::encode_reply(1, what);
    for (auto& [rank, j] : joined_) tcp::send_all(j.fd.get(), reply, soon);
    for (Fd& fd : misstarted_) tcp::send_all(fd.get(), reply, soon);
    return absl::FailedPreconditionError(what);
  }

  const RendezvousSpec& spec_;
  const Clock::time_point deadline_;
  const std::string where_;
  Fd listener_;
  sockaddr_in bound_{};
  Clock::time_point accept_paused_until_{};
  std::deque<Waiting> waiting_;
  std::map<int, Joined> joined_;  // by rank
  std::vector<Fd> misstarted_;    // ranks of this job whose hello contradicts the others
  std::string failure_;           // set by admit()
  int refused_ = 0;
};

}  // namespace

absl::StatusOr<std::string> serve_rendezvous(const RendezvousSpec& spec, const std::string& payload) {
  return Root(spec).run(payload);
}

}  // namespace coppice
