// The n:m built-in (builtin.h).
#include <optional>
#include <string>

#include "sparse/formats.h"
#include "sparse/nm_transposable.h"
#include "sparsifiers/builtin.h"
#include "sparsifiers/mask_ops.h"

namespace coppice {

NmSparsifier::NmSparsifier(int64_t n, int64_t m, int64_t dim, bool transposable)
    : n_(n), m_(m), dim_(dim), transposable_(transposable) {
  COPPICE_CHECK(n >= 1 && n <= m && m <= 256, "nm: needs 1 <= n <= m <= 256, got n = ", n, ", m = ", m);
  COPPICE_CHECK(!transposable || (m <= kMaxTransposableM && dim == -1),
                "nm: transposable masks need m <= ", kMaxTransposableM, " and dim -1, got m = ", m, ", dim = ", dim);
}

std::string NmSparsifier::describe() const {
  return str_cat("nm(n=", n_, ", m=", m_, ", dim=", dim_, transposable_ ? ", transposable" : "", ")");
}

Tensor NmSparsifier::keep_mask(const Tensor& x, const SparsifyContext&) const {
  if (transposable_) {
    const std::string why = shape_mismatch(x.shape());
    COPPICE_CHECK(why.empty(), why);
    return transposable_nm_mask(to_dense(x), n_, m_);
  }
  return sparsify::nm_mask(to_dense(x), n_, m_, dim_, describe());
}

std::string NmSparsifier::shape_mismatch(const Shape& shape) const {
  if (transposable_ && (shape.size() != 2 || shape[0] % m_ != 0 || shape[1] % m_ != 0)) {
    return str_cat(describe(), ": a transposable mask needs a 2-D tensor whose both dims ", m_, " divides, got ",
                   shape_to_string(shape));
  }
  const std::string why = sparsify::nm_shape_error(shape, m_, dim_);
  return why.empty() ? why : str_cat(describe(), ": ", why);
}

std::string NmSparsifier::format_mismatch(const OutputFormat& format) const {
  // nm, or a user's format declared with n:m groups (FormatSpec::nm_groups).
  const FormatSpec* spec = find_format(format.name);
  const std::optional<NmGroups> groups = spec == nullptr ? std::nullopt : format_nm_groups(*spec, format.options);
  if (!groups) return Sparsifier::format_mismatch(format);
  if (dim_ != -1) {
    return str_cat(describe(), " groups along dim ", dim_, ", and format '", format.name,
                   "' groups along the last dim: only dim=-1 fits it");
  }
  // nm's options left 0 are the sparsifier's (apply fills them); a declared format's groups are its own.
  const bool options_are_nm = spec->options == FormatOptionKind::kNm;
  const int64_t n = options_are_nm && format.options.n == 0 ? n_ : groups->n;
  const int64_t m = options_are_nm && format.options.m == 0 ? m_ : groups->m;
  if (m != m_ || n < n_) {
    return str_cat(describe(), " keeps ", n_, " of every ", m_, ", which format '", format.name, "' with n = ", n,
                   ", m = ", m, " cannot hold (it needs m = ", m_, " and n >= ", n_, ")");
  }
  return "";
}

Tensor NmSparsifier::apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const {
  if (format.name != "nm") return Sparsifier::apply(x, format, ctx);
  OutputFormat own = format;
  if (own.options.n == 0) own.options.n = n_;
  if (own.options.m == 0) own.options.m = m_;
  return Sparsifier::apply(x, own, ctx);
}

}  // namespace coppice
