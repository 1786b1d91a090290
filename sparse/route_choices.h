// The decisions of the product planners, as data: which route a product
// takes where more than one could (docs/architecture.md, "Planners").
//
// A planner (sparse/cuda/spmm.cc, sddmm.cc, spmm_choice.cc) decides most
// routes by rule from the operands (format, dtype, shape). A few it decides by
// measurement, because neither side always wins: it times each candidate once
// per key on the real operands and keeps the fastest. Those decisions are
// named here, once, with their candidates:
//
//   decision   candidates (measured)      pins (COPPICE_ROUTES) besides auto
//   csr_spmm   cusparse, rows, tiled      cusparse | rows | tiled | own
//              (CSR @ dense: sparse/cuda/spmm_choice.h; "own": the own kernels, picked by rule)
//   nm24       sparse, dense              sparse | mma_sp | dense
//              (2:4 products: sparse tensor cores or the dense product; "mma_sp":
//              sparse tensor cores through mma.sp even where wgmma runs)
//   bsr_sddmm  tiles, dense               tiles | dense
//              (the BSR SDDMM where the dense route may run: sparse/cuda/sddmm.cc)
//   bsr_sddmm_row_sums tiles, dense       tiles | dense (unpinned: bsr_sddmm's pin)
//              (a sparse linear's weight and bias gradients in BSR, sddmm_row_sums: the
//              SDDMM summing the bias inside, or the dense route and a column-sum pass)
//   bsr_tiles  (by rule)                  tiles | mma_sync | off
//              (the BSR kernels of spmm.cc and sddmm.cc: mma.sync where it runs, its
//              products and SDDMM on wgmma for 32x32, 64x64 and 128x128 blocks on compute capability 9.0,
//              else the WMMA / FMA tiles; tiles: the tiles wherever they run; mma_sync:
//              mma.sync even where wgmma runs; off: neither, the routes they replace)
//   linear_grads (by rule)                one_pass | apart
//              (a sparse linear's three gradients, sparse/ops.h's linear_grads_fused: one pass
//              over each block column for 32x32 BSR blocks in bf16/f16 on compute capability 9.0
//              (sparse/cuda/bsr_wgmma32_grads.cu); apart: the input's product and the SDDMM)
//   sddmm_dense (by rule)                 on | off
//              (the CUDA SDDMM's dense route, a @ b then a gather, from density 0.005:
//              sparse/cuda/sddmm.cc; on: at every density; off: never)
//   attention  (by rule)                  mma_sync
//              (fused attention's kernels: wgmma for head sizes 64 and 128 in bf16/f16 on
//              compute capability 9.0, else mma.sync: sparse/attention/cuda/attention.cu)
//   attention_dq (by rule)                tiles | recompute
//              (the wgmma backward's dq: from the ds tiles dk/dv writes up to T 1024, else
//              forming ds again; tiles: wherever a head's take at most 256 MB; recompute: always)
//   residual_add (by rule)                write_out | apart
//              (a residual stream's add after a product, linear_add_fused: in the write-out
//              of the wgmma BSR kernels of 64x64 and 128x128 blocks; apart: never there,
//              the add left to the next norm's pass: sparse/cuda/spmm.cc)
//
// Every measured decision is recorded (decision, key, candidates, each one's
// time, winner, source), so that
//   - a run saves them with its outputs: the trainer writes them into each
//     checkpoint and into the metrics file's summary record;
//   - a resumed run restores them (restore_route_choices) and computes with
//     the same kernels, hence the same rounding, as the run it continues;
//   - every rank of a data-parallel job takes the same route: where an
//     agreement is installed (distributed/route_agreement.h), a new
//     measurement's winner is rank 0's, sent to every rank.
// Keys name the device model, never its index, so that they mean the same on
// every rank and in every run.
//
// Pins force a decision for tests and comparisons: COPPICE_ROUTES (read once,
// at first use) or set_route_pins / ScopedRoutePins, a comma-separated list
// of decision=value ("csr_spmm=rows,nm24=dense"); "auto" or an absent
// decision leaves it to the planner. A bad list is a coppice::Error naming
// the variable, the entry and what is accepted, thrown at every use until
// code sets the pins. A pinned decision is not measured and not recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coppice {

// One decision's declaration (the table above).
struct RouteDecision {
  std::string_view name;
  std::string_view doc;
  std::vector<std::string_view> candidates;  // measured; empty: decided by rule
  std::vector<std::string_view> pins;        // accepted pin values, "auto" aside
};

// Every decision, in the table's order.
const std::vector<RouteDecision>& route_decisions();

// The pinned value of `decision` ("rows", "off", ...), or nullopt where the
// planner decides. Throws coppice::Error for a bad COPPICE_ROUTES, or an
// undeclared decision (a planner's bug).
std::optional<std::string> route_pin(std::string_view decision);

// Replaces every pin with those of `list` (as COPPICE_ROUTES takes it; ""
// pins nothing); throws coppice::Error for a bad list, keeping the old pins.
// The environment is not read after this.
void set_route_pins(const std::string& list);

// The pins in force, as a list set_route_pins takes.
std::string route_pins();

// Pins for its lifetime, then restores the previous ones (tests):
//   ScopedRoutePins dense({"nm24=dense"});
class ScopedRoutePins {
 public:
  explicit ScopedRoutePins(const std::string& list);
  ~ScopedRoutePins();
  ScopedRoutePins(const ScopedRoutePins&) = delete;
  ScopedRoutePins& operator=(const ScopedRoutePins&) = delete;

 private:
  std::string previous_;
};

// How a recorded choice came about.
enum class RouteSource { kMeasured, kAgreed, kRestored };
std::string_view route_source_name(RouteSource source);  // "measured", "agreed", "restored"

struct RouteChoice {
  std::string decision;
  std::string key;
  std::vector<std::string> candidates;
  // Milliseconds per candidate as this process measured them (empty where restored).
  std::vector<double> times_ms;
  std::string winner;
  RouteSource source = RouteSource::kMeasured;
};

// Returns the index in `candidates` of the route `decision` takes for `key`:
// the recorded one when the key has one (measured or restored before);
// otherwise `measure` is called (outside any lock) for each candidate's time
// in milliseconds, in the order of `candidates`, the fastest wins (the first
// of equals), the agreement, where installed, replaces it with rank 0's, and
// the choice is recorded. `measured` (optional) is set to whether this call
// measured. Throws coppice::Error where a recorded winner is not among
// `candidates` (a restored file from another build), or where `candidates`
// are not among the decision's declared ones.
size_t choose_route(std::string_view decision, const std::string& key, const std::vector<std::string_view>& candidates,
                    const std::function<std::vector<double>()>& measure, bool* measured = nullptr);

// The recorded choices, ordered by decision and key.
std::vector<RouteChoice> recorded_route_choices();

// Per decision: calls that measured, calls that reused a recorded choice.
struct RouteChoiceStats {
  int64_t measured = 0;
  int64_t reused = 0;
  int64_t recorded = 0;  // keys recorded now
};
RouteChoiceStats route_choice_stats(std::string_view decision);

// Forgets every recorded choice and zeroes the counters (tests, benchmarks).
void clear_route_choices();

// The recorded choices as a JSON array (times as integer nanoseconds):
//   [{"decision":"nm24","key":"...","candidates":["sparse","dense"],
//     "times_ns":[81234,90210],"winner":"sparse","source":"measured"}, ...]
std::string route_choices_json();

// Records the choices of a JSON array route_choices_json wrote, as restored
// (each replacing a recorded choice of its key). Checks all of it first:
// a malformed array, an undeclared decision, a candidate the decision does
// not declare or a winner that is not a candidate is a coppice::Error naming
// `origin` (say, the checkpoint's path) and the entry; nothing is recorded then.
void restore_route_choices(const std::string& json, std::string_view origin);

// What a data-parallel job installs so that its ranks agree: given this
// rank's measured choice, returns the index of the winner every rank takes.
using RouteAgreement = std::function<size_t(const RouteChoice& measured)>;

// Installs `agreement` (empty: none) for its lifetime, then restores the previous one.
class ScopedRouteAgreement {
 public:
  explicit ScopedRouteAgreement(RouteAgreement agreement);
  ~ScopedRouteAgreement();
  ScopedRouteAgreement(const ScopedRouteAgreement&) = delete;
  ScopedRouteAgreement& operator=(const ScopedRouteAgreement&) = delete;

 private:
  RouteAgreement previous_;
};

}  // namespace coppice
