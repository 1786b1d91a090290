// The ranks' agreement on measured route decisions
// (distributed/route_agreement.h), over in-process ranks.
#include "distributed/route_agreement.h"

#include <atomic>
#include <string>
#include <vector>

#include "distributed/inproc_communicator.h"
#include "gtest/gtest.h"
#include "tensor/error.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

RouteChoice measured(const std::string& key, const std::string& winner) {
  RouteChoice c;
  c.decision = "nm24";
  c.key = key;
  c.candidates = {"sparse", "dense"};
  c.times_ms = {1.0, 2.0};
  c.winner = winner;
  return c;
}

TEST(RouteAgreement, EveryRankTakesRankZerosWinner) {
  std::vector<size_t> agreed(3, 99);
  run_inproc(3, [&](Communicator& comm) {
    // Rank 0 measured dense faster; the others sparse.
    const RouteChoice mine = measured("H100|k", comm.rank() == 0 ? "dense" : "sparse");
    agreed[static_cast<size_t>(comm.rank())] = route_agreement(comm)(mine);
  });
  EXPECT_EQ(agreed, (std::vector<size_t>{1, 1, 1}));
}

TEST(RouteAgreement, RanksThatMeasuredDifferentKeysAllFail) {
  std::atomic<int> failed{0};
  try {
    run_inproc(2, [&](Communicator& comm) {
      const RouteChoice mine = measured(comm.rank() == 0 ? "H100|batch 32" : "H100|batch 31", "sparse");
      try {
        route_agreement(comm)(mine);
      } catch (const Error& e) {
        ++failed;
        EXPECT_NE(std::string(e.what()).find("not every rank measured the same decision and key"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find(mine.key), std::string::npos) << e.what();
      }
    });
  } catch (const Error& e) { ADD_FAILURE() << "a rank's failure escaped: " << e.what(); }
  EXPECT_EQ(failed.load(), 2);  // every rank, not only the one that differs from rank 0
}

// The digest separates decision from key: ("nm24", "x") differs from a key
// that spells the same bytes across the boundary.
TEST(RouteAgreement, DecisionAndKeyAreHashedApart) {
  std::atomic<int> failed{0};
  run_inproc(2, [&](Communicator& comm) {
    RouteChoice mine = measured(comm.rank() == 0 ? "4x" : "x", "sparse");
    mine.decision = comm.rank() == 0 ? "nm2" : "nm24";
    try {
      route_agreement(comm)(mine);
    } catch (const Error&) { ++failed; }
  });
  EXPECT_EQ(failed.load(), 2);
}

}  // namespace
}  // namespace coppice
