// Sparsifiers by name: what a YAML job names (`sparsifier: {name: magnitude,
// sparsity: 0.9}`) becomes a SparsifierSpec, and make_sparsifier builds it.
//
// Built-ins (builtin.h), with their parameters (* required):
//   keep_all
//   threshold        threshold*
//   random           sparsity*, rescale (bool, default false)
//   magnitude        sparsity*
//   block_magnitude  sparsity*, block_rows*, block_cols (default block_rows),
//                    norm (l2 | l1, default l2)
//   nm               n*, m*, dim (default -1)
//   movement         sparsity*
// A user adds one with register_sparsifier; nothing in the library names it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparsifiers/sparsifier.h"
#include "sparsifiers/spec_value.h"

namespace coppice {

// A sparsifier's name and parameters: typed where they were made (the job
// loader, the library's own densities), or strings a program gave
// (spec_value.h).
struct SparsifierSpec {
  std::string name;
  std::map<std::string, SpecValue> params;
};

// Typed access to a spec's parameters for factories. Every getter throws
// coppice::Error naming the sparsifier and the parameter when it is missing
// (without a default) or is not of the type (a string that does not parse
// as it); finish() throws naming any parameter no getter asked for, and
// listing those asked for.
class SpecParams {
 public:
  explicit SpecParams(const SparsifierSpec& spec) : spec_(spec) {}

  double get_double(const std::string& name);
  double get_double(const std::string& name, double fallback);
  int64_t get_int(const std::string& name);
  int64_t get_int(const std::string& name, int64_t fallback);
  // true/false, yes/no, on/off, 1/0 (any case).
  bool get_bool(const std::string& name);
  bool get_bool(const std::string& name, bool fallback);
  std::string get_string(const std::string& name);
  std::string get_string(const std::string& name, const std::string& fallback);
  bool has(const std::string& name) const { return spec_.params.count(name) > 0; }

  void finish() const;

 private:
  const SpecValue& raw(const std::string& name, const char* type);
  const SparsifierSpec& spec_;
  std::set<std::string> asked_;  // every name a getter asked for
};

using SparsifierFactory = std::function<SparsifierPtr(const SparsifierSpec&)>;

// Adds a sparsifier under `name`; throws when the name is taken or empty.
void register_sparsifier(std::string name, SparsifierFactory factory);
// The sparsifier `spec` names; throws naming the known ones for an unknown
// name, and naming the parameter for a bad one.
SparsifierPtr make_sparsifier(const SparsifierSpec& spec);
// Every registered name, sorted.
std::vector<std::string> registered_sparsifiers();
bool is_sparsifier_registered(const std::string& name);

}  // namespace coppice
