// One rank of a rendezvous and nothing else (no GPU, no NCCL), for
// two_node_rendezvous_test.sh: reads its place from the launch environment
// (distributed/launch_env.h), joins the TCP rendezvous there, and prints what
// rank 0 handed out:
//   rank R of W (local L of N): got "<payload>"
// Rank 0's payload is "hello from rank 0 at MASTER_ADDR:MASTER_PORT". Exits 1
// with the error's one line on stderr when the environment or the
// rendezvous fails. Usage: rendezvous_probe [TIMEOUT_S] (default 20).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "distributed/launch_env.h"
#include "distributed/tcp_rendezvous.h"

int main(int argc, char** argv) {
  const double timeout_s = argc > 1 ? std::atof(argv[1]) : 20.0;
  const absl::StatusOr<coppice::LaunchEnv> env = coppice::launch_env();
  if (!env.ok()) {
    std::cerr << env.status().message() << std::endl;
    return 1;
  }
  const std::string payload = "hello from rank 0 at " + env->master_addr + ":" + std::to_string(env->master_port);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const absl::StatusOr<std::string> got =
      coppice::rendezvous_broadcast(coppice::rendezvous_spec(*env, timeout), payload);
  if (!got.ok()) {
    std::cerr << got.status().message() << std::endl;
    return 1;
  }
  std::cout << "rank " << env->rank << " of " << env->world_size << " (local " << env->local_rank << " of "
            << env->local_world_size << "): got \"" << *got << "\"" << std::endl;
  return 0;
}
