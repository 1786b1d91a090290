#include "train/config_section.h"

namespace coppice::job_config {

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

int64_t scalar_integer(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {}
  if (is_integer_literal(n.Scalar()))
    bad(where, shorten_for_error(n.Scalar()), " does not fit in a 64-bit integer (",
        std::numeric_limits<int64_t>::min(), " to ", std::numeric_limits<int64_t>::max(), ")");
  bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
}

uint64_t scalar_seed(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<uint64_t>();  // refuses a sign
  } catch (const YAML::Exception&) {}
  if (!is_integer_literal(n.Scalar())) bad(where, "expected an integer, got ", quote_for_error(n.Scalar()));
  bad(where, "must be ", key_range("seed")->text(), ", got ", shorten_for_error(n.Scalar()),
      n.Scalar()[0] == '-' ? "" : " (it does not fit in 64 bits)");
}

bool is_int(const YAML::Node& n, int64_t* out) {
  try {
    *out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) { return false; }
}

}  // namespace coppice::job_config
