// The ranks' agreement on the product planners' measured decisions
// (sparse/route_choices.h): each rank measures a new key on its own GPU, and
// all take rank 0's winner, so that every rank computes with the same
// kernels and the same rounding. The trainer installs it for NCCL jobs
// (one process per rank); in-process ranks share one process's records.
//
// Ordering: a rank measures a key the first time its planner meets it, which
// in data-parallel training is at the same point of every rank's step (the
// same model and batch shapes). The agreement issues two collectives there:
// a broadcast of rank 0's (key digest, winner) and a max-reduction of
// "this rank measured another key". A mismatch (ranks whose batch shapes
// differ) is a coppice::Error on every rank, naming this rank's decision and
// key, instead of a hang or a silent difference.
#pragma once

#include "distributed/communicator.h"
#include "sparse/route_choices.h"

namespace coppice {

// The agreement over `comm` (which must outlive it).
RouteAgreement route_agreement(Communicator& comm);

}  // namespace coppice
