#include "sparsifiers/sparsifier.h"

#include <algorithm>
#include <string_view>

#include "sparse/formats.h"
#include "tensor/ops.h"

namespace coppice {

const char* sparsifier_kind_name(SparsifierKind kind) {
  switch (kind) {
    case SparsifierKind::kStreaming: return "streaming";
    case SparsifierKind::kMaterializing: return "materializing";
    case SparsifierKind::kBlocking: return "blocking";
  }
  return "unknown";
}

// The format's name and options, and whether an arbitrary pattern fits it
// (every format but n:m stores any pattern; BSR and Blocked-ELL as the blocks
// that hold an entry). A sparsifier builds from dense values, so a block
// format needs its block shape given.
std::string Sparsifier::format_mismatch(const OutputFormat& format) const {
  const std::string_view name = format.name;
  const FormatSpec* spec = find_format(name);
  if (spec == nullptr) {
    return str_cat("unknown format '", name, "' (expected one of ", str_join(format_names(), ", "), ")");
  }
  const FormatOptions& o = format.options;
  if (has_block_shape(spec->options)) {
    if (o.block_rows < 0 || o.block_cols < 0) {
      return str_cat("format '", name, "' has a negative block shape [", o.block_rows, ", ", o.block_cols, "]");
    }
    if (o.block_rows == 0 && o.block_cols == 0) {
      return str_cat("format '", name, "' needs a block shape (options block_rows, block_cols)");
    }
    if (spec->options == FormatOptionKind::kSquareBlock && o.block_rows > 0 && o.block_cols > 0 &&
        o.block_rows != o.block_cols) {
      return str_cat("format '", name, "' needs square blocks, got ", o.block_rows, "x", o.block_cols);
    }
  }
  if (!spec->holds_any_pattern) {
    return str_cat(describe(), " can keep any pattern, and format '", name, "' holds at most n of every m entries: ",
                   "only an n:m sparsifier (with the format's m and no more than its n) fits it");
  }
  return "";
}

Tensor Sparsifier::apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const {
  const std::string why = format_mismatch(format);
  COPPICE_CHECK(why.empty(), describe(), ": cannot produce format '", format.name, "': ", why);
  const Tensor dense = to_dense(x);
  const Tensor mask = keep_mask(dense, ctx);
  const double scale = value_scale();
  const Tensor kept = scale == 1.0 ? dense : mul(dense, scale);
  if (format.name == "dense") return where(mask, kept, zeros({}, kept.options()));
  try {
    return sparse_from_mask(kept, mask, format.name, format.options);
  } catch (const Error& e) { fail(describe(), ": cannot produce format '", format.name, "': ", e.what()); }
}

}  // namespace coppice
