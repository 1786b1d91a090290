#include "distributed/tcp_rendezvous.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "distributed/job_token.h"
#include "distributed/rendezvous_root.h"
#include "distributed/rendezvous_wire.h"
#include "distributed/tcp_socket.h"
#include "tensor/error.h"

namespace coppice {
namespace {

namespace wire = rendezvous_wire;
using tcp::Clock;
using tcp::Fd;

// Between two attempts to reach rank 0.
constexpr std::chrono::milliseconds kRetryPause(100);

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return str_cat(d.count() / 1000, " s");
  return str_cat(d.count() / 1000.0, " s");
}

void pause_before_retry(Clock::time_point deadline) {
  std::this_thread::sleep_for(
      std::min<Clock::duration>(kRetryPause, std::max<Clock::duration>(deadline - Clock::now(), Clock::duration())));
}

// ---- ranks 1.. ----

// A connection to rank 0, retrying while it is not listening yet (refused)
// or its name does not resolve for a moment; invalid with *error set once
// the deadline has passed. `once`: one round of attempts, no retrying.
Fd connect_to_root(const RendezvousSpec& spec, Clock::time_point deadline, bool once, std::string* error) {
  for (;;) {
    std::string why;
    std::vector<sockaddr_in> addrs = tcp::resolve(spec.master_addr, spec.master_port, &why);
    if (addrs.empty()) *error = str_cat("cannot resolve '", spec.master_addr, "': ", why);
    for (const sockaddr_in& a : addrs) {
      const Clock::time_point attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(2));
      Fd fd = tcp::try_connect(a, attempt_deadline, &why);
      if (fd.valid()) return fd;
      *error = why;
    }
    if (once || Clock::now() >= deadline) return Fd();
    pause_before_retry(deadline);
  }
}

absl::StatusOr<std::string> join(const RendezvousSpec& spec) {
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  const std::string where = str_cat(spec.master_addr, ":", spec.master_port);
  const std::string who = str_cat("rendezvous: rank ", spec.rank);
  const std::string hello = wire::encode_hello(spec.rank, spec.world_size, spec.job_token);

  // Rank 0 may drop a connection before its hello is read (when strangers
  // crowd it): one closed before any answer is made again, once rank 0 still
  // accepts connections (if it does not, it has gone: fail now).
  std::string last_error = "no attempt was made";
  bool dropped = false;
  for (;;) {
    Fd fd = connect_to_root(spec, deadline, /*once=*/dropped, &last_error);
    if (!fd.valid() && dropped) {
      return absl::UnavailableError(str_cat(
          who, ": rank 0 at ", where, " closed the connection before answering and no longer accepts one: ", last_error,
          " (did rank 0 exit?)"));
    }
    if (!fd.valid()) {
      return absl::DeadlineExceededError(
          str_cat(who, " could not reach ", where, " within ", seconds_text(spec.timeout), ": ", last_error));
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (std::string e = tcp::send_all(fd.get(), hello, deadline); !e.empty()) {
      return absl::UnavailableError(str_cat(who, " could not send its hello to ", where, ": ", e));
    }

    std::string header;
    size_t got = 0;
    const std::string e = tcp::recv_exact(fd.get(), wire::kReplyHeaderSize, &header, deadline, &got);
    if (e == "timed out while receiving") {
      return absl::DeadlineExceededError(str_cat(who, ": rank 0 at ", where, " did not send the payload within ",
                                                 seconds_text(spec.timeout), " (are all ranks started?)"));
    }
    if (!e.empty() && got == 0) {
      if (Clock::now() >= deadline) {
        return absl::DeadlineExceededError(str_cat(who, ": ", where, " gave no answer within ",
                                                   seconds_text(spec.timeout), ": the connection closed (", e, ")"));
      }
      dropped = true;
      pause_before_retry(deadline);
      continue;
    }
    if (!e.empty()) return absl::UnavailableError(str_cat(who, " connected to ", where, " but got no answer: ", e));

    const wire::ReplyHeader h = wire::decode_reply_header(header);
    if (!h.magic_ok) {
      return absl::DataLossError(str_cat(who, ": ", where,
                                         " answered with bytes that are not a rendezvous reply "
                                         "(another service on that port?)"));
    }
    if (h.length > wire::kMaxPayload) {
      return absl::DataLossError(str_cat(who, ": ", where, " announced a payload of ", h.length,
                                         " bytes, more than the limit of ", wire::kMaxPayload));
    }
    std::string body;
    if (std::string cut = tcp::recv_exact(fd.get(), static_cast<size_t>(h.length), &body, deadline); !cut.empty()) {
      return absl::UnavailableError(str_cat(who, ": the payload from ", where, " was cut short: ", cut));
    }
    if (h.status != 0) {
      return absl::FailedPreconditionError(str_cat(who, ": rank 0 at ", where, " refused: ", body));
    }
    return body;
  }
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
  if (spec.rank == 0 && payload_from_root.size() > wire::kMaxPayload) {
    return absl::InvalidArgumentError(str_cat("rendezvous: the payload has ", payload_from_root.size(),
                                              " bytes, more than the limit of ", wire::kMaxPayload));
  }
  if (spec.world_size == 1) return payload_from_root;
  if (spec.master_port <= 0 || spec.master_port > 65535) {
    return absl::InvalidArgumentError(
        str_cat("rendezvous: rank ", spec.rank, ": master port ", spec.master_port, " is not in 1..65535"));
  }
  if (spec.master_addr.empty()) {
    return absl::InvalidArgumentError(str_cat("rendezvous: rank ", spec.rank, ": no master address"));
  }
  if (spec.job_token.empty()) {
    return absl::InvalidArgumentError(str_cat("rendezvous: rank ", spec.rank, ": no job token (a world of ",
                                              spec.world_size, " ranks needs one: set COPPICE_JOB_TOKEN)"));
  }
  if (std::string problem = job_token_problem(spec.job_token); !problem.empty()) {
    return absl::InvalidArgumentError(str_cat("rendezvous: rank ", spec.rank, ": the job token ", problem));
  }
  if (spec.rank == 0 && spec.hello_window.count() <= 0) {
    return absl::InvalidArgumentError(
        str_cat("rendezvous: the hello window must be > 0, got ", spec.hello_window.count(), " ms"));
  }
  return spec.rank == 0 ? serve_rendezvous(spec, payload_from_root) : join(spec);
}

absl::StatusOr<int> pick_free_tcp_port(const std::string& host) {
  std::string error;
  std::vector<sockaddr_in> addrs = tcp::resolve(host, 0, &error);
  if (addrs.empty()) return absl::UnavailableError(str_cat("pick_free_tcp_port: cannot resolve '", host, "': ", error));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr = addrs[0];
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(str_cat("pick_free_tcp_port: ", tcp::errno_text(errno)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

RendezvousSpec rendezvous_spec(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  RendezvousSpec spec;
  spec.master_addr = env.master_addr;
  spec.master_port = env.master_port;
  spec.rank = env.rank;
  spec.world_size = env.world_size;
  spec.job_token = env.job_token;
  spec.bind_all_interfaces = env.rendezvous_bind_any;
  // local_world_size 0: the launcher did not say.
  spec.ranks_on_other_machines = env.local_world_size > 0 && env.local_world_size < env.world_size;
  spec.timeout = timeout;
  return spec;
}

}  // namespace coppice
