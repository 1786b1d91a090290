#include "distributed/route_agreement.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

// FNV-1a over the decision and the key: the same on every rank and build.
int64_t digest(const RouteChoice& c) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string* s : {&c.decision, &c.key}) {
    for (unsigned char ch : *s) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator: ("ab", "c") is not ("a", "bc")
  }
  return static_cast<int64_t>(h >> 1);
}

}  // namespace

RouteAgreement route_agreement(Communicator& comm) {
  return [&comm](const RouteChoice& measured) -> size_t {
    const auto local = std::find(measured.candidates.begin(), measured.candidates.end(), measured.winner);
    COPPICE_CHECK(local != measured.candidates.end(), "route agreement: internal: winner '", measured.winner,
                  "' is not a candidate");
    const int64_t mine = digest(measured);
    const Tensor root = from_vector<int64_t>({mine, local - measured.candidates.begin()}, {2});
    comm.broadcast(root, 0).wait();
    const int64_t root_digest = root.data<int64_t>()[0], root_winner = root.data<int64_t>()[1];
    const Tensor differs = from_vector<int64_t>({root_digest != mine ? 1 : 0}, {1});
    comm.all_reduce(differs, ReduceOp::kMax).wait();
    COPPICE_CHECK(differs.data<int64_t>()[0] == 0, "route agreement: rank ", comm.rank(), " measured ",
                  measured.decision, " for key '", measured.key,
                  "' where not every rank measured the same decision and key: the ranks ran different products "
                  "(every rank must run the same shapes in the same order)");
    COPPICE_CHECK(root_winner >= 0 && root_winner < static_cast<int64_t>(measured.candidates.size()),
                  "route agreement: rank 0's winner ", root_winner, " for ", measured.decision, " key '", measured.key,
                  "' is out of range (", measured.candidates.size(), " candidates)");
    return static_cast<size_t>(root_winner);
  };
}

}  // namespace coppice
