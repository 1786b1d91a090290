// The table of tensor formats: one row per format, the built-in ones
// ("dense", "coo", "csr", "csc", "bsr", "blocked_ell", "nm", "masked") and
// those a user registers. Every list of format names reads it: to_format and
// the other conversions, the YAML rules, sparsifiers' output formats, the
// sparse safetensors reader and the kernel registrations that cover every
// built-in format. A row says what a format is (name, layout, the tensors it
// holds, its options), how to build it from dense values and a mask or from
// COO, how to read its stored entries back as COO, and the parts and
// attributes it is saved as.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

struct FormatOptions {
  // BSR's block shape; Blocked-ELL's block size is block_rows (block_cols 0
  // or equal). 0 means: the source's block (when it is BSR or Blocked-ELL),
  // else an error naming the missing option. block_cols 0 with block_rows set
  // means a square block.
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // n:m's n and m; 0 means the source's (when it is n:m), else 2:4.
  int64_t n = 0;
  int64_t m = 0;

  static FormatOptions block(int64_t rows, int64_t cols) { return {rows, cols, 0, 0}; }
  static FormatOptions block(int64_t size) { return {size, size, 0, 0}; }
  static FormatOptions nm(int64_t n, int64_t m) { return {0, 0, n, m}; }
  bool operator==(const FormatOptions& o) const {
    return block_rows == o.block_rows && block_cols == o.block_cols && n == o.n && m == o.m;
  }
};

// Which FormatOptions fields a format reads.
enum class FormatOptionKind : uint8_t {
  kNone,
  kBlock,        // block_rows x block_cols
  kSquareBlock,  // block_rows == block_cols
  kNm,           // n of every m
};

// Whether a format with these options has a block shape (block_rows,
// block_cols).
inline bool has_block_shape(FormatOptionKind k) {
  return k == FormatOptionKind::kBlock || k == FormatOptionKind::kSquareBlock;
}

// The tensors a format holds.
enum class FormatRank : uint8_t {
  kAny,       // 0-d included (dense, masked)
  kAtLeast1,  // one dimension or more
  kMatrix,    // 2-D only
};

// The groups of an n:m format: every row keeps exactly n of each group of m
// consecutive entries along the last dimension.
struct NmGroups {
  int64_t n = 0;
  int64_t m = 0;
};

// What a saved sparse tensor consists of: its parts by name (as
// SparseImpl::parts() gives them), its attributes (SparseImpl::attributes())
// and its shape.
struct FormatParts {
  std::map<std::string, Tensor> parts;
  std::map<std::string, std::string> attributes;
  Shape shape;
};

struct FormatSpec {
  std::string name;
  Layout layout = Layout::kCustom;  // kCustom for a user's format
  FormatRank rank = FormatRank::kAtLeast1;
  FormatOptionKind options = FormatOptionKind::kNone;
  // Whether any pattern fits (n:m's does not: at most n of every m).
  bool holds_any_pattern = true;
  // The parts it is saved as, in SparseImpl::parts() order, and the
  // attributes a saved tensor must carry (optional ones are not listed).
  std::vector<std::string> parts;
  std::vector<std::string> required_attributes;

  // The entries of `dense` where the bool `mask` (same shape and device)
  // holds, in this format; the options are resolved (no zeros where the
  // format reads them); errors name `op`, the caller. Required.
  std::function<Tensor(const Tensor& dense, const Tensor& mask, const FormatOptions& options, std::string_view op)>
      from_mask;
  // A coalesced COO tensor in this format, every stored entry (explicit
  // zeros included) kept. Default: from_mask over the COO's dense form and
  // stored positions.
  std::function<Tensor(const Tensor& coo, const FormatOptions& options, std::string_view op)> from_coo;
  // Every stored entry of a tensor of this format as a coalesced COO tensor.
  // Default: the entries at its stored_positions (explicit zeros kept,
  // repeated positions summed) where the row gives them, else the non-zeros
  // of its dense form.
  std::function<Tensor(const Tensor& t)> to_coo;
  // The options a tensor of this format has (for a format that has options).
  std::function<FormatOptions(const Tensor& t)> options_of;
  // A tensor of this format from saved parts, validated as parts from
  // outside are; required for saving and loading it.
  std::function<Tensor(const FormatParts& saved)> from_parts;
  // For every element of values(t), the row-major flat position it stores,
  // or -1 (padding): what mask updates and the position-based kernels read
  // (sparse/stored_positions.h). The built-in formats' are sparse/'s own; a
  // user's format that sets it trains with prune-and-regrow and GMP.
  std::function<std::vector<int64_t>(const Tensor& t)> stored_positions;
  // The unit (rows, cols) a mask update keeps, drops and grows whole.
  // Default: the block of a format with a block shape, else 1 x 1.
  std::function<std::pair<int64_t, int64_t>(const Tensor& t)> update_unit;
  // Set for a format of n:m groups (nm, and a user's declared so): its
  // groups for these options (a tensor's, from options_of, or a rule's).
  // Mask updates then drop and grow inside each group (optim/group_regrow.h)
  // and SR-STE projects dense weights onto it (optim/sr_ste.h).
  std::function<NmGroups(const FormatOptions& options)> nm_groups;
  // A format whose tensors store whole blocks of one shape whatever its
  // options (a declaration dense inside its blocks, sparse/levels): that
  // shape. Its mask updates change whole blocks, and a rule's initial mask
  // keeps whole blocks (block_unit). Formats with a block shape among their
  // options (bsr, blocked_ell) have it there instead.
  std::optional<std::pair<int64_t, int64_t>> fixed_block;
};

// Whether stored_positions (sparse/stored_positions.h) knows the format's
// positions: a built-in sparse format, or a user's whose row sets them.
bool knows_stored_positions(const FormatSpec& spec);
// Whether mask updates (prune-and-regrow, GMP) can change the pattern of a
// tensor of the format: sparse, any pattern fits, stored positions known.
bool is_mask_changing_format(const FormatSpec& spec);
// The unit of a mask update of `t` (FormatSpec::update_unit, else its fixed
// block or its block shape, else 1 x 1).
std::pair<int64_t, int64_t> mask_update_unit(const Tensor& t);
// The block a tensor of the format with these options stores whole: the
// block shape of its options (a zero block_rows: not given) or its fixed
// block; nullopt for a format of single entries.
std::optional<std::pair<int64_t, int64_t>> block_unit(const FormatSpec& spec, const FormatOptions& options);
// The n:m groups of the format with these options (FormatSpec::nm_groups),
// or nullopt for a format without.
std::optional<NmGroups> format_nm_groups(const FormatSpec& spec, const FormatOptions& options);
// The n:m groups of `t`'s format, or nullopt.
std::optional<NmGroups> nm_groups_of(const Tensor& t);

// The kernel family (TensorImpl::kernel_family) of the formats declared by
// their levels (sparse/levels): the generic kernels registered under this
// name serve each of them where it has no kernel of its own.
inline constexpr std::string_view kLevelFamily = "levels";

// The row named `name`, or nullptr.
const FormatSpec* find_format(std::string_view name);
// The same, or throws "<op>: unknown format '<name>' (expected one of ...)".
const FormatSpec& format_spec(std::string_view name, std::string_view op);
// Every format's name, the built-in ones first in the order above, then the
// registered ones in registration order.
std::vector<std::string> format_names();
// The built-in sparse formats (every built-in but "dense"), for kernel
// registrations that cover each of them.
const std::vector<std::string>& builtin_sparse_format_names();
// The name of the built-in format of `layout` (Layout::kCsr -> "csr"): what
// code that registers a kernel for one format names it by.
const std::string& format_name(Layout layout);
// The formats with a block shape (options kBlock or kSquareBlock).
std::vector<std::string> block_format_names();
// Whether the format `name` has a block shape (false for an unknown name).
bool is_block_format(std::string_view name);
// The block shape {rows, cols} of a tensor whose format has one, from its
// row's options_of; nullopt for every other format. What code that treats
// block formats alike reads, rather than listing their layouts.
std::optional<std::pair<int64_t, int64_t>> block_shape_of(const Tensor& t);

// Adds a user's format (layout kCustom) to the table. Throws when the name is
// empty or taken, or from_mask is missing. Call it at start-up, before the
// format is used (for example from a static initializer, as the kernels
// register).
void register_format(FormatSpec spec);

}  // namespace coppice
