// Kernel routes as data (internal): a product's planner (spmm.cc, sddmm.cc)
// holds one table of routes, each a name, a predicate saying whether the
// route can take a problem, and the launcher that computes it, and runs the
// first route whose predicate holds. The order of the table is the policy;
// its last route takes every problem.
//
// A route whose launcher calls cuSPARSE on a type combination that some
// versions refuse (CUSPARSE_STATUS_NOT_SUPPORTED: Blocked-ELL and CSR in
// bf16/f16) says so (may_be_refused), and where cuSPARSE does refuse, the
// next route whose predicate holds runs instead; unless_refused is the one
// place that tells a refusal from another error.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "tensor/error.h"
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

template <typename Problem>
struct KernelRoute {
  std::string_view name;
  bool (*applies)(const Problem&);
  Tensor (*launch)(const Problem&);
  bool may_be_refused = false;
};

// run(), or nullopt where cuSPARSE refused its type combination (other
// errors propagate).
std::optional<Tensor> unless_refused(const std::function<Tensor()>& run);

// The route of `routes` that takes `p`: the first whose predicate holds
// (skipping `after` and those before it, when given).
template <typename Problem, typename Routes>
const KernelRoute<Problem>* first_route(const Routes& routes, const Problem& p,
                                        const KernelRoute<Problem>* after = nullptr) {
  bool skipping = after != nullptr;
  for (const KernelRoute<Problem>& r : routes) {
    if (skipping) {
      skipping = &r != after;
      continue;
    }
    if (r.applies(p)) return &r;
  }
  return nullptr;
}

// Runs the route that takes `p`, and the next one where cuSPARSE refuses it;
// `ran` (optional) gets the name of the route that produced the result.
template <typename Problem, typename Routes>
Tensor run_first_route(const Routes& routes, const Problem& p, std::string_view* ran = nullptr) {
  for (const KernelRoute<Problem>* r = first_route(routes, p); r != nullptr; r = first_route(routes, p, r)) {
    if (ran != nullptr) *ran = r->name;
    if (!r->may_be_refused) return r->launch(p);
    if (std::optional<Tensor> out = unless_refused([&] { return r->launch(p); })) return *std::move(out);
  }
  fail("internal: no kernel route takes the problem");
}

}  // namespace coppice::sparse_cuda
