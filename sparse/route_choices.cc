#include "sparse/route_choices.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "tensor/error.h"
#include "tensor/io/json.h"

namespace coppice {
namespace {

constexpr const char* kPinsVariable = "COPPICE_ROUTES";

const std::vector<RouteDecision>& decisions() {
  static const auto* table = new std::vector<RouteDecision>{
      {"csr_spmm",
       "CSR @ dense on CUDA (sparse/cuda/spmm_choice.h)",
       {"cusparse", "rows", "tiled"},
       {"cusparse", "rows", "tiled", "own"}},
      {"nm24",
       "2:4 products on CUDA: sparse tensor cores or the dense product (sparse/cuda/spmm.cc)",
       {"sparse", "dense"},
       {"sparse", "mma_sp", "dense"}},
      {"bsr_sddmm",
       "the BSR SDDMM where the dense route may run (sparse/cuda/sddmm.cc)",
       {"tiles", "dense"},
       {"tiles", "dense"}},
      {"bsr_sddmm_row_sums",
       "a sparse linear's weight and bias gradients in BSR where the dense route may run: the SDDMM summing the "
       "bias inside, or the dense route and a column-sum pass (sparse/cuda/sddmm.cc); unpinned, bsr_sddmm's pin",
       {"tiles", "dense"},
       {"tiles", "dense"}},
      {"bsr_tiles",
       "the BSR kernels of the SpMM and SDDMM planners: mma.sync where it runs (its products on wgmma for 32x32, "
       "64x64 and 128x128 blocks on compute capability 9.0), else the WMMA / FMA tiles (sparse/cuda/bsr_products.h); "
       "tiles: the tiles wherever they run; mma_sync: mma.sync even where wgmma runs; off: neither",
       {},
       {"tiles", "mma_sync", "off"}},
      {"linear_grads",
       "a sparse linear's gradients of input, weight and bias (sparse/ops.h's linear_grads_fused): one pass over each "
       "block column for 32x32 BSR blocks in bf16/f16 on compute capability 9.0 (sparse/cuda/bsr_wgmma32_grads.cu); "
       "apart: always the input's product and the weight's SDDMM",
       {},
       {"one_pass", "apart"}},
      {"sddmm_dense",
       "the dense route of the CUDA SDDMM (a @ b by cuBLAS, then a gather: sparse/cuda/sddmm.cc), from density "
       "0.005; on: at every density; off: never",
       {},
       {"on", "off"}},
      {"attention",
       "fused attention on CUDA: wgmma for head sizes 64 and 128 in bf16/f16 on compute capability 9.0, else mma.sync "
       "(sparse/attention/cuda/attention.cu); mma_sync: everywhere (the reference)",
       {},
       {"mma_sync"}},
      {"attention_dq",
       "the wgmma attention backward's dq: from the ds tiles its dk/dv pass writes up to T 1024, else forming ds "
       "again (sparse/attention/cuda/attention.cu); tiles: the tiles wherever a head's take at most 256 MB; "
       "recompute: always forming ds again",
       {},
       {"tiles", "recompute"}},
      {"residual_add",
       "a residual stream's add after a product (tensor's linear_add_fused): in the product's write-out where its "
       "kernel adds it (the wgmma BSR kernels of 32x32, 64x64 and 128x128 blocks), else left to the next norm's pass; "
       "write_out: so; apart: never in the write-out",
       {},
       {"write_out", "apart"}},
  };
  return *table;
}

const RouteDecision* find_decision(std::string_view name) {
  for (const RouteDecision& d : decisions()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

bool contains(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string decision_names() {
  std::vector<std::string_view> names;
  for (const RouteDecision& d : decisions()) names.push_back(d.name);
  return str_join(names, ", ");
}

// "a=b,c=d" as a map; `where` names the source in errors. "auto" entries
// are dropped (the planner decides).
std::map<std::string, std::string> parse_pins(const std::string& list, const std::string& where) {
  std::map<std::string, std::string> pins;
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string entry = list.substr(start, end - start);
    const size_t eq = entry.find('=');
    COPPICE_CHECK(eq != std::string::npos && eq > 0, where, ": entry '", entry,
                  "' is not decision=value (decisions: ", decision_names(), ")");
    const std::string name = entry.substr(0, eq), value = entry.substr(eq + 1);
    const RouteDecision* d = find_decision(name);
    COPPICE_CHECK(d != nullptr, where, ": '", name, "' is not a route decision (", decision_names(), ")");
    COPPICE_CHECK(value == "auto" || contains(d->pins, value), where, ": ", name, "='", value,
                  "' is not accepted (auto, ", str_join(d->pins, ", "), ")");
    COPPICE_CHECK(pins.count(name) == 0, where, ": ", name, " is pinned twice");
    if (value != "auto") pins[name] = value;
    start = end + 1;
  }
  return pins;
}

struct State {
  std::mutex mu;
  bool pins_loaded = false;
  std::map<std::string, std::string> pins;
  // Loaded and empty: route_pin answers without the lock (every product asks).
  std::atomic<bool> none_pinned{false};
  std::map<std::pair<std::string, std::string>, RouteChoice> choices;  // by (decision, key)
  std::map<std::string, RouteChoiceStats, std::less<>> stats;
  RouteAgreement agreement;
};

State& state() {
  static auto* s = new State();  // never destroyed: kernels may run during exit
  return *s;
}

// The pins, read from the environment at the first use (with s.mu held).
const std::map<std::string, std::string>& pins_locked(State& s) {
  if (!s.pins_loaded) {
    const char* v = std::getenv(kPinsVariable);
    // A bad variable throws here, leaving pins_loaded false: every later use
    // throws the same error until code sets the pins.
    s.pins = v == nullptr ? std::map<std::string, std::string>{} : parse_pins(v, str_cat(kPinsVariable, "='", v, "'"));
    s.pins_loaded = true;
    s.none_pinned.store(s.pins.empty(), std::memory_order_release);
  }
  return s.pins;
}

std::string format_pins(const std::map<std::string, std::string>& pins) {
  std::string s;
  for (const auto& [name, value] : pins) s += str_cat(s.empty() ? "" : ",", name, "=", value);
  return s;
}

int64_t to_ns(double ms) { return std::isfinite(ms) ? std::llround(ms * 1e6) : -1; }

const std::string& member_string(const json::Value& item, const char* name, const std::string& where) {
  const json::Value* v = item.find(name);
  COPPICE_CHECK(v != nullptr && v->is_string() && !v->as_string().empty(), where, ": \"", name,
                "\" must be a non-empty string");
  return v->as_string();
}

// One restored entry, checked against the table.
RouteChoice restored_choice(const json::Value& item, const std::string& where) {
  COPPICE_CHECK(item.is_object(), where, ": expected an object, got ", json::kind_name(item.kind()));
  RouteChoice c;
  c.source = RouteSource::kRestored;
  c.decision = member_string(item, "decision", where);
  c.key = member_string(item, "key", where);
  c.winner = member_string(item, "winner", where);
  const RouteDecision* d = find_decision(c.decision);
  COPPICE_CHECK(d != nullptr && !d->candidates.empty(), where, ": '", c.decision,
                "' is not a measured route decision (", decision_names(), ")");
  const json::Value* cands = item.find("candidates");
  COPPICE_CHECK(cands != nullptr && cands->is_array() && !cands->items().empty(), where,
                ": \"candidates\" must be a non-empty array of names");
  for (const json::Value& n : cands->items()) {
    COPPICE_CHECK(n.is_string() && contains(d->candidates, n.as_string()), where, ": candidate ",
                  n.is_string() ? str_cat("'", n.as_string(), "'") : json::kind_name(n.kind()), " is not one of ",
                  c.decision, "'s (", str_join(d->candidates, ", "), ")");
    c.candidates.push_back(n.as_string());
  }
  COPPICE_CHECK(std::find(c.candidates.begin(), c.candidates.end(), c.winner) != c.candidates.end(), where,
                ": winner '", c.winner, "' is not among its candidates");
  return c;
}

}  // namespace

const std::vector<RouteDecision>& route_decisions() { return decisions(); }

std::optional<std::string> route_pin(std::string_view decision) {
  COPPICE_CHECK(find_decision(decision) != nullptr, "route_pin: internal: '", decision,
                "' is not a declared route decision");
  State& s = state();
  if (s.none_pinned.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard<std::mutex> lock(s.mu);
  const auto& pins = pins_locked(s);
  const auto it = pins.find(std::string(decision));
  if (it == pins.end()) return std::nullopt;
  return it->second;
}

void set_route_pins(const std::string& list) {
  std::map<std::string, std::string> pins = parse_pins(list, "route pins");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.pins = std::move(pins);
  s.pins_loaded = true;
  s.none_pinned.store(s.pins.empty(), std::memory_order_release);
}

std::string route_pins() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return format_pins(pins_locked(s));
}

ScopedRoutePins::ScopedRoutePins(const std::string& list) : previous_(route_pins()) { set_route_pins(list); }
ScopedRoutePins::~ScopedRoutePins() { set_route_pins(previous_); }

std::string_view route_source_name(RouteSource source) {
  switch (source) {
    case RouteSource::kMeasured: return "measured";
    case RouteSource::kAgreed: return "agreed";
    case RouteSource::kRestored: return "restored";
  }
  return "?";
}

size_t choose_route(std::string_view decision, const std::string& key, const std::vector<std::string_view>& candidates,
                    const std::function<std::vector<double>()>& measure, bool* measured) {
  const RouteDecision* d = find_decision(decision);
  COPPICE_CHECK(d != nullptr && !d->candidates.empty(), "choose_route: internal: '", decision,
                "' is not a measured route decision");
  COPPICE_CHECK(!candidates.empty(), "choose_route: internal: no candidates for ", decision);
  for (std::string_view c : candidates) {
    COPPICE_CHECK(contains(d->candidates, c), "choose_route: internal: '", c, "' is not a candidate of ", decision);
  }
  if (measured != nullptr) *measured = false;
  State& s = state();
  RouteAgreement agreement;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const auto it = s.choices.find({std::string(decision), key});
    if (it != s.choices.end()) {
      const RouteChoice& c = it->second;
      const auto w = std::find(candidates.begin(), candidates.end(), c.winner);
      COPPICE_CHECK(w != candidates.end(), decision, ": the ", route_source_name(c.source), " route '", c.winner,
                    "' for key '", key, "' is not among the routes that can run it here (", str_join(candidates, ", "),
                    ")");
      ++s.stats[c.decision].reused;
      return static_cast<size_t>(w - candidates.begin());
    }
    agreement = s.agreement;
  }
  // Measured outside the lock (it synchronizes the device); two threads that
  // meet a new key at once both measure, and the later one's record stays.
  const std::vector<double> times = measure();
  COPPICE_CHECK(times.size() == candidates.size(), "choose_route: internal: ", times.size(), " times for ",
                candidates.size(), " candidates of ", decision);
  RouteChoice c;
  c.decision = std::string(decision);
  c.key = key;
  for (std::string_view n : candidates) c.candidates.emplace_back(n);
  c.times_ms = times;
  size_t winner = 0;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i] < times[winner]) winner = i;
  }
  if (agreement) {
    c.winner = c.candidates[winner];
    winner = agreement(c);
    COPPICE_CHECK(winner < candidates.size(), decision, ": the agreed route ", winner, " for key '", key,
                  "' is out of range (", candidates.size(), " candidates)");
    c.source = RouteSource::kAgreed;
  }
  c.winner = c.candidates[winner];
  if (measured != nullptr) *measured = true;
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.stats[c.decision].measured;
  s.choices[{c.decision, c.key}] = std::move(c);
  return winner;
}

std::vector<RouteChoice> recorded_route_choices() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<RouteChoice> out;
  for (const auto& [id, c] : s.choices) out.push_back(c);
  return out;
}

RouteChoiceStats route_choice_stats(std::string_view decision) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto it = s.stats.find(decision);
  RouteChoiceStats st = it == s.stats.end() ? RouteChoiceStats{} : it->second;
  st.recorded = 0;
  for (const auto& [id, c] : s.choices) st.recorded += id.first == decision;
  return st;
}

void clear_route_choices() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.choices.clear();
  s.stats.clear();
}

std::string route_choices_json() {
  std::string out = "[";
  for (const RouteChoice& c : recorded_route_choices()) {
    std::string cands, times;
    for (const std::string& n : c.candidates) cands += str_cat(cands.empty() ? "" : ",", json::quote(n));
    for (double t : c.times_ms) times += str_cat(times.empty() ? "" : ",", to_ns(t));
    out +=
        str_cat(out.size() > 1 ? "," : "", "{\"decision\":", json::quote(c.decision), ",\"key\":", json::quote(c.key),
                ",\"candidates\":[", cands, "],\"times_ns\":[", times, "],\"winner\":", json::quote(c.winner),
                ",\"source\":", json::quote(std::string(route_source_name(c.source))), "}");
  }
  return out + "]";
}

void restore_route_choices(const std::string& text, std::string_view origin) {
  auto parsed = json::parse(text);
  COPPICE_CHECK(parsed.ok(), origin, ": route choices: ", parsed.status().message());
  COPPICE_CHECK(parsed->is_array(), origin, ": route choices: expected a JSON array, got ",
                json::kind_name(parsed->kind()));
  std::vector<RouteChoice> restored;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < parsed->items().size(); ++i) {
    RouteChoice c = restored_choice(parsed->items()[i], str_cat(origin, ": route choices: entry ", i));
    COPPICE_CHECK(seen.insert({c.decision, c.key}).second, origin, ": route choices: entry ", i, ": ", c.decision,
                  " key '", c.key, "' appears twice");
    restored.push_back(std::move(c));
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (RouteChoice& c : restored) s.choices[{c.decision, c.key}] = std::move(c);
}

ScopedRouteAgreement::ScopedRouteAgreement(RouteAgreement agreement) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  previous_ = std::exchange(s.agreement, std::move(agreement));
}

ScopedRouteAgreement::~ScopedRouteAgreement() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.agreement = std::move(previous_);
}

}  // namespace coppice
