// A one-shot rendezvous over TCP: rank 0 hands a small payload (NCCL's
// unique id) to every other rank of a job, given only the master address and
// port of the launch environment (distributed/launch_env.h).
//
// Rank 0 listens on master_port (on every interface, so that a master_addr
// that resolves to a loopback alias on rank 0's own machine still works for
// remote ranks), accepts one connection per other rank, checks each one's
// hello (its rank and the world size it was started with) and, once all
// world_size - 1 have arrived, sends them the payload. Ranks other than 0
// connect to master_addr:master_port (a name or an IPv4 address), retrying
// while rank 0 is not yet listening, send their hello and read the payload.
//
// Every step is bounded by `timeout`, counted from the call. Errors are one
// line naming the rank, the address and what went wrong, e.g.
//   "rendezvous: rank 1 could not reach 127.0.0.1:29500 within 30 s: connection refused"
// A peer that says it is a rank already seen, or reports another world size,
// fails the rendezvous on rank 0 and on the ranks connected so far (they are
// told why). A connection that sends anything but a valid hello (a port
// scanner, a stale job) is dropped and does not disturb the others.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace coppice {

struct RendezvousSpec {
  std::string master_addr;  // host name or IPv4 address of rank 0
  int master_port = 0;      // 1..65535 when world_size > 1
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

// The payload, on every rank: rank 0 returns `payload_from_root` once every
// other rank has received it (written to its socket); other ranks ignore
// their argument and return what rank 0 sent. With a world of one, returns
// `payload_from_root` without touching the network. Payloads up to 1 MiB.
absl::StatusOr<std::string> rendezvous_broadcast(const RendezvousSpec& spec, const std::string& payload_from_root);

// A TCP port on `host` that was free a moment ago (the kernel's choice for a
// bind to port 0), for tests that start several ranks on one machine.
absl::StatusOr<int> pick_free_tcp_port(const std::string& host = "127.0.0.1");

}  // namespace coppice
