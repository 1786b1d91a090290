#include "sparsifiers/registry.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <optional>
#include <utility>

#include "sparsifiers/builtin.h"

namespace coppice {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

SparsifierPtr make_keep_all(const SparsifierSpec& spec) {
  SpecParams p(spec);
  p.finish();
  return std::make_shared<KeepAllSparsifier>();
}

SparsifierPtr make_threshold(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const double t = p.get_double("threshold");
  p.finish();
  return std::make_shared<ThresholdSparsifier>(t);
}

SparsifierPtr make_random(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const double s = p.get_double("sparsity");
  const bool rescale = p.get_bool("rescale", false);
  p.finish();
  return std::make_shared<RandomFractionSparsifier>(s, rescale);
}

SparsifierPtr make_magnitude(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const double s = p.get_double("sparsity");
  p.finish();
  return std::make_shared<MagnitudeFractionSparsifier>(s);
}

SparsifierPtr make_block_magnitude(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const double s = p.get_double("sparsity");
  const int64_t bh = p.get_int("block_rows");
  const int64_t bw = p.get_int("block_cols", bh);
  const std::string norm = lower(p.get_string("norm", "l2"));
  COPPICE_CHECK(norm == "l2" || norm == "l1", "sparsifier 'block_magnitude': parameter 'norm' must be l2 or l1, got '",
                norm, "'");
  p.finish();
  return std::make_shared<BlockMagnitudeSparsifier>(s, bh, bw, norm == "l1" ? BlockNorm::kL1 : BlockNorm::kL2);
}

SparsifierPtr make_nm(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const int64_t n = p.get_int("n"), m = p.get_int("m"), dim = p.get_int("dim", -1);
  const bool transposable = p.get_bool("transposable", false);
  p.finish();
  return std::make_shared<NmSparsifier>(n, m, dim, transposable);
}

SparsifierPtr make_movement(const SparsifierSpec& spec) {
  SpecParams p(spec);
  const double s = p.get_double("sparsity");
  p.finish();
  return std::make_shared<MovementSparsifier>(s);
}

class Registry {
 public:
  static Registry& instance() {
    static Registry* r = new Registry();  // never destroyed: factories may be used at exit
    return *r;
  }

  void add(std::string name, SparsifierFactory f) {
    COPPICE_CHECK(!name.empty(), "register_sparsifier: the name is empty");
    COPPICE_CHECK(f != nullptr, "register_sparsifier: no factory for '", name, "'");
    std::lock_guard<std::mutex> lock(mu_);
    COPPICE_CHECK(factories_.count(name) == 0, "register_sparsifier: '", name, "' is already registered");
    factories_.emplace(std::move(name), std::move(f));
  }

  SparsifierFactory find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      std::vector<std::string> known;
      for (const auto& [k, unused] : factories_) known.push_back(k);
      fail("make_sparsifier: unknown sparsifier '", name, "' (known: ", str_join(known, ", "), ")");
    }
    return it->second;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& [k, unused] : factories_) out.push_back(k);
    return out;
  }

  bool has(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    return factories_.count(name) > 0;
  }

 private:
  Registry() {
    factories_ = {{"keep_all", make_keep_all},
                  {"threshold", make_threshold},
                  {"random", make_random},
                  {"magnitude", make_magnitude},
                  {"block_magnitude", make_block_magnitude},
                  {"nm", make_nm},
                  {"movement", make_movement}};
  }

  mutable std::mutex mu_;
  std::map<std::string, SparsifierFactory> factories_;
};

}  // namespace

const SpecValue& SpecParams::raw(const std::string& name, const char* type) {
  asked_.insert(name);
  auto it = spec_.params.find(name);
  COPPICE_CHECK(it != spec_.params.end(), "sparsifier '", spec_.name, "': missing parameter '", name, "' (", type, ")");
  return it->second;
}

double SpecParams::get_double(const std::string& name) {
  const SpecValue& v = raw(name, "a number");
  const std::optional<double> d = v.number();
  COPPICE_CHECK(d && std::isfinite(*d), "sparsifier '", spec_.name, "': parameter '", name,
                "' must be a finite number, got '", v.text(), "'");
  return *d;
}

double SpecParams::get_double(const std::string& name, double fallback) {
  asked_.insert(name);
  return has(name) ? get_double(name) : fallback;
}

int64_t SpecParams::get_int(const std::string& name) {
  const SpecValue& v = raw(name, "an integer");
  const std::optional<int64_t> i = v.integer();
  COPPICE_CHECK(i.has_value(), "sparsifier '", spec_.name, "': parameter '", name, "' must be an integer, got '",
                v.text(), "'");
  return *i;
}

int64_t SpecParams::get_int(const std::string& name, int64_t fallback) {
  asked_.insert(name);
  return has(name) ? get_int(name) : fallback;
}

bool SpecParams::get_bool(const std::string& name) {
  const SpecValue& v = raw(name, "true or false");
  const std::optional<bool> b = v.boolean();
  COPPICE_CHECK(b.has_value(), "sparsifier '", spec_.name, "': parameter '", name, "' must be true or false, got '",
                v.text(), "'");
  return *b;
}

bool SpecParams::get_bool(const std::string& name, bool fallback) {
  asked_.insert(name);
  return has(name) ? get_bool(name) : fallback;
}

std::string SpecParams::get_string(const std::string& name) { return raw(name, "a string").text(); }

std::string SpecParams::get_string(const std::string& name, const std::string& fallback) {
  asked_.insert(name);
  return has(name) ? get_string(name) : fallback;
}

void SpecParams::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [k, unused] : spec_.params) {
    if (asked_.count(k) == 0) unknown.push_back(k);
  }
  COPPICE_CHECK(unknown.empty(), "sparsifier '", spec_.name, "': unknown parameter", unknown.size() > 1 ? "s '" : " '",
                str_join(unknown, "', '"),
                "' (it takes: ", asked_.empty() ? std::string("none") : str_join(asked_, ", "), ")");
}

void register_sparsifier(std::string name, SparsifierFactory factory) {
  Registry::instance().add(std::move(name), std::move(factory));
}

SparsifierPtr make_sparsifier(const SparsifierSpec& spec) {
  SparsifierFactory f = Registry::instance().find(spec.name);
  SparsifierPtr s = f(spec);
  COPPICE_CHECK(s != nullptr, "make_sparsifier: the factory of '", spec.name, "' returned no sparsifier");
  return s;
}

std::vector<std::string> registered_sparsifiers() { return Registry::instance().names(); }

bool is_sparsifier_registered(const std::string& name) { return Registry::instance().has(name); }

}  // namespace coppice
