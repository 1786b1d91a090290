// What the rendezvous tests share: a free loopback port and the spec of one
// rank of a job on it.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "distributed/tcp_rendezvous.h"
#include "gtest/gtest.h"

namespace coppice::rendezvous_test {

inline std::string message(const absl::Status& s) { return std::string(s.message()); }

// A port on 127.0.0.1 that was free a moment ago (0, with a test failure,
// when none could be had).
inline int free_port() {
  absl::StatusOr<int> port = pick_free_tcp_port();
  EXPECT_TRUE(port.ok()) << port.status().message();
  return port.ok() ? *port : 0;
}

// The job token of the tests' jobs.
inline constexpr char kTestToken[] = "the-jobs-own-token-0123456789";

// Rank `rank` of a world of `world` meeting at 127.0.0.1:`port`.
inline RendezvousSpec spec_for(int port, int rank, int world,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
                               const std::string& token = kTestToken) {
  RendezvousSpec s;
  s.master_addr = "127.0.0.1";
  s.master_port = port;
  s.rank = rank;
  s.world_size = world;
  s.job_token = token;
  s.timeout = timeout;
  return s;
}

}  // namespace coppice::rendezvous_test
