#include "sparse/formats.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <memory>
#include <mutex>
#include <utility>

#include "sparse/convert.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

using sparse_detail::mask_to_bsr;
using sparse_detail::mask_to_compressed;
using sparse_detail::mask_to_coo;

// A whole non-negative decimal integer of at most 18 digits (no sign).
bool parse_count(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(uint8_t(c)); }))
    return false;
  return std::from_chars(s.data(), s.data() + s.size(), out).ec == std::errc();
}

// "BHxBW" -> (bh, bw).
bool parse_block(std::string_view s, int64_t& bh, int64_t& bw) {
  const size_t x = s.find('x');
  return x != std::string_view::npos && parse_count(s.substr(0, x), bh) && parse_count(s.substr(x + 1), bw);
}

const std::string& attribute(const FormatParts& p, const std::string& key) {
  auto it = p.attributes.find(key);
  COPPICE_CHECK(it != p.attributes.end(), "missing attribute '", key, "'");
  return it->second;
}

int64_t integer_attribute(const FormatParts& p, const std::string& key) {
  int64_t v = 0;
  COPPICE_CHECK(parse_count(attribute(p, key), v), "attribute ", key, " = '", attribute(p, key),
                "', expected an integer");
  return v;
}

Tensor coo_from_parts(const FormatParts& p) {
  bool coalesced = false;
  if (auto it = p.attributes.find("coalesced"); it != p.attributes.end()) {
    COPPICE_CHECK(it->second == "true" || it->second == "false", "attribute coalesced = '", it->second,
                  "', expected true or false");
    coalesced = it->second == "true";
  }
  return sparse_coo(p.parts.at("indices"), p.parts.at("values"), p.shape, coalesced);
}

Tensor bsr_from_parts(const FormatParts& p) {
  Tensor t = sparse_bsr(p.parts.at("crow_indices"), p.parts.at("col_indices"), p.parts.at("values"), p.shape);
  if (auto it = p.attributes.find("block"); it != p.attributes.end()) {
    int64_t bh = 0, bw = 0;
    COPPICE_CHECK(parse_block(it->second, bh, bw), "attribute block = '", it->second, "', expected BHxBW");
    const BsrImpl& b = bsr_impl(t, "bsr");
    COPPICE_CHECK(bh == b.block_rows() && bw == b.block_cols(), "attribute block = '", it->second,
                  "' disagrees with values of shape ", shape_to_string(p.parts.at("values").shape()));
  }
  return t;
}

Tensor blocked_ell_from_parts(const FormatParts& p) {
  int64_t bh = 0, bw = 0;
  const std::string& block = attribute(p, "block");
  COPPICE_CHECK(parse_block(block, bh, bw) && bh == bw, "attribute block = '", block, "', expected BxB");
  return sparse_blocked_ell(p.parts.at("ell_col_indices"), p.parts.at("values"), p.shape, bh);
}

FormatOptions block_of(const Tensor& t) {
  if (const auto* e = t.impl_as<BlockedEllImpl>()) return FormatOptions::block(e->block_size());
  const BsrImpl& b = bsr_impl(t, "format options");
  return FormatOptions::block(b.block_rows(), b.block_cols());
}

Tensor coo_to_blocks(const Tensor& coo, const FormatOptions& o, std::string_view) {
  return coo_to_bsr(coo, o.block_rows, o.block_cols);
}

// The built-in rows. Conversions between two formats that share their
// arrays (CSR and CSC, BSR and Blocked-ELL) take direct paths in to_format.
// Each row: name, layout, rank, options, holds_any_pattern, saved parts,
// required attributes; then from_mask, from_coo, to_coo, options_of,
// from_parts, stored_positions and update_unit (nullptr: the default, or
// none; the built-in formats' positions are sparse/stored_positions.cc's).
std::vector<FormatSpec> builtin_formats() {
  using K = FormatOptionKind;
  using R = FormatRank;
  std::vector<FormatSpec> f;
  f.push_back({"dense",
               Layout::kDense,
               R::kAny,
               K::kNone,
               true,
               {},
               {},
               [](const Tensor& d, const Tensor& m, const FormatOptions&, std::string_view) {
                 return where(m, d, zeros({}, d.options()));
               },
               [](const Tensor& coo, const FormatOptions&, std::string_view) { return to_dense(coo); },
               [](const Tensor& t) { return dense_to_coo(t); },
               nullptr,
               nullptr,
               nullptr,
               nullptr,
               nullptr,
               std::nullopt});
  f.push_back(
      {"coo",
       Layout::kCoo,
       R::kAtLeast1,
       K::kNone,
       true,
       {"indices", "values"},
       {},
       [](const Tensor& d, const Tensor& m, const FormatOptions&, std::string_view) { return mask_to_coo(d, m); },
       [](const Tensor& coo, const FormatOptions&, std::string_view) { return coo; },
       [](const Tensor& t) { return coalesce(t); },
       nullptr,
       coo_from_parts,
       nullptr,
       nullptr,
       nullptr,
       std::nullopt});
  f.push_back({"csr",
               Layout::kCsr,
               R::kMatrix,
               K::kNone,
               true,
               {"crow_indices", "col_indices", "values"},
               {},
               [](const Tensor& d, const Tensor& m, const FormatOptions&, std::string_view) {
                 return mask_to_compressed(d, m, Layout::kCsr);
               },
               [](const Tensor& coo, const FormatOptions&, std::string_view) { return coo_to_csr(coo); },
               compressed_to_coo,
               nullptr,
               [](const FormatParts& p) {
                 return sparse_csr(p.parts.at("crow_indices"), p.parts.at("col_indices"), p.parts.at("values"),
                                   p.shape);
               },
               nullptr,
               nullptr,
               nullptr,
               std::nullopt});
  f.push_back({"csc",
               Layout::kCsc,
               R::kMatrix,
               K::kNone,
               true,
               {"ccol_indices", "row_indices", "values"},
               {},
               [](const Tensor& d, const Tensor& m, const FormatOptions&, std::string_view) {
                 return mask_to_compressed(d, m, Layout::kCsc);
               },
               [](const Tensor& coo, const FormatOptions&, std::string_view) { return coo_to_csc(coo); },
               compressed_to_coo,
               nullptr,
               [](const FormatParts& p) {
                 return sparse_csc(p.parts.at("ccol_indices"), p.parts.at("row_indices"), p.parts.at("values"),
                                   p.shape);
               },
               nullptr,
               nullptr,
               nullptr,
               std::nullopt});
  f.push_back({"bsr",
               Layout::kBsr,
               R::kMatrix,
               K::kBlock,
               true,
               {"crow_indices", "col_indices", "values"},
               {},
               [](const Tensor& d, const Tensor& m, const FormatOptions& o, std::string_view op) {
                 return mask_to_bsr(d, m, o.block_rows, o.block_cols, op);
               },
               coo_to_blocks,
               bsr_to_coo,
               block_of,
               bsr_from_parts,
               nullptr,
               nullptr,
               nullptr,
               std::nullopt});
  f.push_back({"blocked_ell",
               Layout::kBlockedEll,
               R::kMatrix,
               K::kSquareBlock,
               true,
               {"ell_col_indices", "values"},
               {"block"},
               [](const Tensor& d, const Tensor& m, const FormatOptions& o, std::string_view op) {
                 return bsr_to_blocked_ell(mask_to_bsr(d, m, o.block_rows, o.block_rows, op));
               },
               [](const Tensor& coo, const FormatOptions& o, std::string_view op) {
                 return bsr_to_blocked_ell(coo_to_blocks(coo, o, op));
               },
               [](const Tensor& t) { return bsr_to_coo(blocked_ell_to_bsr(t)); },
               block_of,
               blocked_ell_from_parts,
               nullptr,
               nullptr,
               nullptr,
               std::nullopt});
  // n:m keeps the non-zeros whatever the source stored: a group has exactly n
  // slots, so explicit zeros cannot be told from padding.
  f.push_back({"nm",
               Layout::kNm,
               R::kAtLeast1,
               K::kNm,
               false,
               {"values", "indices"},
               {"n", "m"},
               [](const Tensor& d, const Tensor& m, const FormatOptions& o, std::string_view op) {
                 return sparse_detail::nm_from_mask(d, m, o.n, o.m, op);
               },
               [](const Tensor& coo, const FormatOptions& o, std::string_view op) {
                 Tensor dense = to_dense(coo);
                 return sparse_detail::nm_from_mask(dense, ne(dense, 0.0), o.n, o.m, op);
               },
               sparse_detail::nm_to_coo,
               [](const Tensor& t) {
                 const NmImpl& s = nm_impl(t, "format options");
                 return FormatOptions::nm(s.n(), s.m());
               },
               [](const FormatParts& p) {
                 return sparse_nm(p.parts.at("values"), p.parts.at("indices"), p.shape, integer_attribute(p, "n"),
                                  integer_attribute(p, "m"));
               },
               nullptr,
               nullptr,
               // Options left 0 are 2:4 (FormatOptions).
               [](const FormatOptions& o) {
                 return NmGroups{o.n > 0 ? o.n : 2, o.m > 0 ? o.m : 4};
               },
               std::nullopt});
  f.push_back(
      {"masked",
       Layout::kMasked,
       R::kAny,
       K::kNone,
       true,
       {"values", "mask"},
       {},
       [](const Tensor& d, const Tensor& m, const FormatOptions&, std::string_view) { return sparse_masked(d, m); },
       [](const Tensor& coo, const FormatOptions&, std::string_view) { return sparse_detail::coo_to_masked(coo); },
       [](const Tensor& t) {
         const MaskedImpl& s = masked_impl(t, "to_format");
         return mask_to_coo(s.values(), s.mask());
       },
       nullptr,
       [](const FormatParts& p) { return sparse_masked(p.parts.at("values"), p.parts.at("mask")); },
       nullptr,
       nullptr,
       nullptr,
       std::nullopt});
  return f;
}

// The table: the built-in rows, then the registered ones. Rows are never
// removed, so pointers to them stay valid (a deque-like vector of pointers).
struct FormatTable {
  std::mutex mutex;
  std::vector<std::unique_ptr<const FormatSpec>> rows;

  FormatTable() {
    for (FormatSpec& s : builtin_formats()) rows.push_back(std::make_unique<const FormatSpec>(std::move(s)));
  }
  static FormatTable& instance() {
    static FormatTable table;
    return table;
  }
};

}  // namespace

const FormatSpec* find_format(std::string_view name) {
  FormatTable& table = FormatTable::instance();
  std::lock_guard<std::mutex> lock(table.mutex);
  for (const auto& row : table.rows)
    if (row->name == name) return row.get();
  return nullptr;
}

const FormatSpec& format_spec(std::string_view name, std::string_view op) {
  const FormatSpec* spec = find_format(name);
  if (spec == nullptr) fail(op, ": unknown format '", name, "' (expected one of ", str_join(format_names(), ", "), ")");
  return *spec;
}

std::vector<std::string> format_names() {
  FormatTable& table = FormatTable::instance();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<std::string> names;
  for (const auto& row : table.rows) names.push_back(row->name);
  return names;
}

const std::vector<std::string>& builtin_sparse_format_names() {
  // The table's built-in rows (registered ones are kCustom), read once.
  static const std::vector<std::string> names = [] {
    FormatTable& table = FormatTable::instance();
    std::lock_guard<std::mutex> lock(table.mutex);
    std::vector<std::string> n;
    for (const auto& row : table.rows)
      if (row->layout != Layout::kDense && row->layout != Layout::kCustom) n.push_back(row->name);
    return n;
  }();
  return names;
}

bool is_block_format(std::string_view name) {
  const FormatSpec* spec = find_format(name);
  return spec != nullptr && has_block_shape(spec->options);
}

std::optional<std::pair<int64_t, int64_t>> block_shape_of(const Tensor& t) {
  const FormatSpec* spec = t.defined() ? find_format(t.format()) : nullptr;
  if (spec == nullptr || !has_block_shape(spec->options) || !spec->options_of) return std::nullopt;
  const FormatOptions o = spec->options_of(t);
  return std::make_pair(o.block_rows, o.block_cols > 0 ? o.block_cols : o.block_rows);
}

const std::string& format_name(Layout layout) {
  COPPICE_CHECK(layout != Layout::kCustom, "format_name: a user's formats share Layout::kCustom; name them instead");
  FormatTable& table = FormatTable::instance();
  std::lock_guard<std::mutex> lock(table.mutex);
  for (const auto& row : table.rows) {
    if (row->layout == layout) return row->name;  // rows are never removed: the reference stays valid
  }
  fail("format_name: no built-in format has layout ", static_cast<int>(layout));
}

std::vector<std::string> block_format_names() {
  FormatTable& table = FormatTable::instance();
  std::lock_guard<std::mutex> lock(table.mutex);
  std::vector<std::string> names;
  for (const auto& row : table.rows) {
    if (has_block_shape(row->options)) names.push_back(row->name);
  }
  return names;
}

void register_format(FormatSpec spec) {
  COPPICE_CHECK(!spec.name.empty(), "register_format: empty format name");
  COPPICE_CHECK(spec.from_mask != nullptr, "register_format: format '", spec.name, "' has no from_mask");
  spec.layout = Layout::kCustom;
  FormatTable& table = FormatTable::instance();
  std::lock_guard<std::mutex> lock(table.mutex);
  for (const auto& row : table.rows)
    COPPICE_CHECK(row->name != spec.name, "register_format: format '", spec.name, "' is already registered");
  table.rows.push_back(std::make_unique<const FormatSpec>(std::move(spec)));
}

bool knows_stored_positions(const FormatSpec& spec) {
  return spec.layout != Layout::kDense && (spec.layout != Layout::kCustom || spec.stored_positions != nullptr);
}

bool is_mask_changing_format(const FormatSpec& spec) { return knows_stored_positions(spec) && spec.holds_any_pattern; }

std::pair<int64_t, int64_t> mask_update_unit(const Tensor& t) {
  const FormatSpec* spec = t.defined() ? find_format(t.format()) : nullptr;
  if (spec != nullptr && spec->update_unit) return spec->update_unit(t);
  if (spec != nullptr && spec->fixed_block) return *spec->fixed_block;
  return block_shape_of(t).value_or(std::make_pair(int64_t{1}, int64_t{1}));
}

std::optional<std::pair<int64_t, int64_t>> block_unit(const FormatSpec& spec, const FormatOptions& options) {
  if (has_block_shape(spec.options) && options.block_rows > 0)
    return std::make_pair(options.block_rows, options.block_cols > 0 ? options.block_cols : options.block_rows);
  return spec.fixed_block;
}

std::optional<NmGroups> format_nm_groups(const FormatSpec& spec, const FormatOptions& options) {
  if (!spec.nm_groups) return std::nullopt;
  return spec.nm_groups(options);
}

std::optional<NmGroups> nm_groups_of(const Tensor& t) {
  const FormatSpec* spec = t.defined() ? find_format(t.format()) : nullptr;
  if (spec == nullptr || !spec->nm_groups) return std::nullopt;
  return spec->nm_groups(spec->options_of ? spec->options_of(t) : FormatOptions{});
}

}  // namespace coppice
