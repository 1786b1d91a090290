// Rank 0's side of the TCP rendezvous (distributed/tcp_rendezvous.h, which
// describes the behaviour): listening, judging hellos, refusing strangers,
// handing out the payload. Internal to distributed/.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "distributed/tcp_rendezvous.h"

namespace coppice {

// rendezvous_broadcast on rank 0, its arguments already checked.
absl::StatusOr<std::string> serve_rendezvous(const RendezvousSpec& spec, const std::string& payload);

}  // namespace coppice
