// A one-shot rendezvous over TCP: rank 0 hands a small payload (NCCL's unique
// id) to every other rank of a job, given the master address and port and the
// job token of the launch environment (distributed/launch_env.h).
//
// Rank 0 listens on master_port at master_addr's own address (the interface
// the others reach it by, not every interface), accepts connections, checks
// each one's hello (its rank, the world size it was started with, and the job
// token, distributed/job_token.h) and, once all world_size - 1 ranks have
// said hello, sends them the payload. Ranks other than 0 connect to
// master_addr:master_port (a name or an IPv4 address), retrying while rank 0
// is not yet listening, send their hello and read the payload.
//
// Where rank 0 listens. master_addr is resolved on rank 0 and it binds to
// that address, which must be one of its machine's: a master_addr that names
// another machine fails at once. A name that resolves on rank 0's machine to
// a loopback address (Debian's /etc/hosts maps the host name to 127.0.1.1)
// is refused when the launcher says some ranks run elsewhere (they could not
// reach it); when the launcher does not say, it is used, and a timeout says
// why remote ranks may not have come. Behind NAT, or in a container whose
// published address is not its own, bind_all_interfaces (set by
// COPPICE_RENDEZVOUS_BIND=any) listens on every interface instead: the job
// token still keeps strangers out.
//
// Strangers. A connection whose first bytes are not a hello of this job (a
// port scanner, another program, a rank of another job or build, a wrong
// token, a hello that is malformed or too long, or nothing at all within
// hello_window) is closed and reported in one line on rank 0, naming the
// peer's address and what was wrong (never the token), e.g.
//   "rendezvous: rank 0 on 127.0.0.1:29500 refused 127.0.0.1:40112: a wrong job token (...)"
// and the rendezvous goes on: the job's ranks still complete. At most
// kHelloSize bytes are read from any connection; all connections are served
// at once (poll), each for at most hello_window; at most 64 wait for their
// hello at a time (the oldest is dropped for a newer one, and a rank whose
// connection was dropped before any answer connects again).
//
// A peer with the right token that says it is a rank already seen, or
// reports another world size, fails the rendezvous on rank 0 and on the ranks
// connected so far (they are told why): it is a rank of this job, misstarted.
//
// Every wait is bounded by `timeout`, counted from the call. Errors are one
// line naming the rank, the address and what went wrong, e.g.
//   "rendezvous: rank 1 could not reach 127.0.0.1:29500 within 30 s: connection refused"
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "distributed/launch_env.h"

namespace coppice {

struct RendezvousSpec {
  std::string master_addr;  // host name or IPv4 address of rank 0
  int master_port = 0;      // 1..65535 when world_size > 1
  int rank = 0;
  int world_size = 1;
  // The job's secret (distributed/job_token.h): the same on every rank, and
  // needed when world_size > 1.
  std::string job_token;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Rank 0: listen on every interface instead of master_addr's address.
  bool bind_all_interfaces = false;
  // Rank 0: the launcher says some ranks run on other machines, so a
  // master_addr resolving to a loopback address is refused at once.
  bool ranks_on_other_machines = false;
  // Rank 0: how long a connection may take to send its whole hello (a rank
  // sends it as soon as it has connected).
  std::chrono::milliseconds hello_window{std::chrono::seconds(10)};
  // Rank 0: where each refused connection is reported, one line without a
  // newline; unset: a line on stderr.
  std::function<void(const std::string&)> log;
};

// The rendezvous of the rank `env` describes (distributed/launch_env.h):
// its address, port, rank, world, token and bind setting; some ranks are on
// other machines when the launcher says so (a local world smaller than the
// world).
RendezvousSpec rendezvous_spec(const LaunchEnv& env, std::chrono::milliseconds timeout);

// The payload, on every rank: rank 0 returns `payload_from_root` once every
// other rank has received it (written to its socket); other ranks ignore
// their argument and return what rank 0 sent. With a world of one, returns
// `payload_from_root` without touching the network. Payloads up to 1 MiB.
absl::StatusOr<std::string> rendezvous_broadcast(const RendezvousSpec& spec, const std::string& payload_from_root);

// A TCP port on `host` that was free a moment ago (the kernel's choice for a
// bind to port 0), for tests that start several ranks on one machine.
absl::StatusOr<int> pick_free_tcp_port(const std::string& host = "127.0.0.1");

}  // namespace coppice
