#include "sparse/levels/builtin_levels.h"

#include <map>
#include <string>

#include "sparse/sparse_impl.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace coppice::levels {

LevelFormat builtin_level_format(std::string_view format, int64_t rank, const FormatOptions& options,
                                 std::string_view op) {
  const bool matrix = format == "csr" || format == "csc" || format == "bsr" || format == "blocked_ell";
  COPPICE_CHECK(rank >= 1 && (!matrix || rank == 2), op, ": the ", format, " format takes ",
                matrix ? "matrices" : "tensors of at least one dimension", ", not ", rank, " dimensions");
  LevelFormat f;
  if (format == "csr") {
    f.levels = {dense(0), compressed(1)};
  } else if (format == "csc") {
    f.levels = {dense(1), compressed(0)};
  } else if (format == "coo") {
    f.index_dtype = DType::kI64;
    f.levels = {compressed(0, /*unique=*/false)};
    for (int64_t d = 1; d < rank; ++d) f.levels.push_back(singleton(d));
  } else if (format == "bsr" || format == "blocked_ell") {
    const int64_t cols = options.block_cols != 0 ? options.block_cols : options.block_rows;
    f.block = {options.block_rows, cols};
    f.levels = {dense(0), format == "bsr" ? compressed(1) : ranged(1), dense(2), dense(3)};
  } else if (format == "nm") {
    for (int64_t d = 0; d + 1 < rank; ++d) f.levels.push_back(dense(d));
    Level groups = n_out_of_m(rank - 1, options.n != 0 ? options.n : 2, options.m != 0 ? options.m : 4);
    groups.index_dtype = DType::kU8;
    f.levels.push_back(groups);
  } else {
    fail(op, ": '", format,
         "' is not a built-in sparse format with a level declaration (csr, csc, coo, bsr, "
         "blocked_ell, nm)");
  }
  return f;
}

std::optional<std::string> builtin_format_of(const LevelFormat& format, const Shape& shape) {
  const auto rank = static_cast<int64_t>(shape.size());
  FormatOptions options;
  if (format.block.size() == 2) options = FormatOptions::block(format.block[0], format.block[1]);
  const Level& last = format.levels.back();
  if (last.type == LevelType::kNOutOfM) options = FormatOptions::nm(last.n, last.m);
  for (const char* name : {"csr", "csc", "coo", "bsr", "blocked_ell", "nm"}) {
    const bool matrix = std::string_view(name) != "coo" && std::string_view(name) != "nm";
    if (matrix && rank != 2) continue;
    if (std::string_view(name) == "blocked_ell" && options.block_rows != options.block_cols) continue;
    if (same_levels(format, builtin_level_format(name, rank, options, "builtin_format_of"))) return name;
  }
  return std::nullopt;
}

LevelTensor level_tensor_of(const Tensor& t, std::string_view op) {
  COPPICE_CHECK(t.defined() && t.is_sparse() && t.device().is_cpu(), op, ": needs a sparse tensor on the CPU");
  const std::string format(t.format());
  std::map<std::string, Tensor> parts;
  for (auto& [name, part] : sparse_impl(t, op).parts()) parts[name] = part.contiguous();
  const std::map<std::string, std::string> attributes = sparse_impl(t, op).attributes();
  FormatOptions options;
  if (const auto block = block_shape_of(t)) options = FormatOptions::block(block->first, block->second);
  if (format == "nm") options = FormatOptions::nm(std::stoll(attributes.at("n")), std::stoll(attributes.at("m")));
  const int64_t rank = t.dim();
  LevelTensor lt{builtin_level_format(format, rank, options, op), t.shape(), {}, {}, Tensor()};
  lt.positions.resize(lt.format.levels.size());
  lt.coordinates.resize(lt.format.levels.size());
  const Tensor values = parts.at("values");
  lt.values = values.reshape({-1});
  if (format == "csr" || format == "csc") {
    lt.positions[1] = parts.at(format == "csr" ? "crow_indices" : "ccol_indices");
    lt.coordinates[1] = parts.at(format == "csr" ? "col_indices" : "row_indices");
  } else if (format == "coo") {
    const Tensor& indices = parts.at("indices");  // [rank, nnz]
    const int64_t nnz = indices.size(1);
    lt.positions[0] = from_vector(std::vector<int64_t>{0, nnz}, {2});
    for (int64_t d = 0; d < rank; ++d) lt.coordinates[static_cast<size_t>(d)] = indices.select(0, d).contiguous();
  } else if (format == "bsr") {
    lt.positions[1] = parts.at("crow_indices");
    lt.coordinates[1] = parts.at("col_indices");
  } else if (format == "blocked_ell") {
    lt.coordinates[1] = parts.at("ell_col_indices").reshape({-1});  // [block rows, slots]
    lt.values = level_values_of(t);
  } else {  // nm
    lt.coordinates.back() = parts.at("indices").reshape({-1});
  }
  check_level_tensor(lt, op);
  return lt;
}

namespace {

// Whether COO's points are in strictly increasing order (coalesced).
bool coalesced(const std::vector<Tensor>& coordinates, int64_t nnz) {
  std::vector<std::vector<int64_t>> c;
  for (const Tensor& t : coordinates) c.push_back(t.to(DType::kI64).to_vector<int64_t>());
  for (int64_t i = 1; i < nnz; ++i) {
    for (const auto& d : c) {
      const auto a = d[static_cast<size_t>(i - 1)], b = d[static_cast<size_t>(i)];
      if (a != b) {
        if (a > b) return false;
        break;
      }
      if (&d == &c.back()) return false;  // a duplicate point
    }
  }
  return true;
}

}  // namespace

Tensor builtin_tensor_of(const LevelTensor& t, std::string_view format, std::string_view op) {
  check_level_tensor(t, op);
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  FormatOptions options;
  if (!t.format.block.empty()) options = FormatOptions::block(t.format.block[0], t.format.block[1]);
  if (format == "nm") options = FormatOptions::nm(t.format.levels.back().n, t.format.levels.back().m);
  const LevelFormat expected = builtin_level_format(format, rank, options, op);
  COPPICE_CHECK(same_levels(t.format, expected), op, ": a tensor of ", describe(t.format), " is not the ", format,
                " format, which is ", describe(expected));
  FormatParts p{{}, {}, t.shape};
  if (format == "csr" || format == "csc") {
    p.parts[format == "csr" ? "crow_indices" : "ccol_indices"] = t.positions[1];
    p.parts[format == "csr" ? "col_indices" : "row_indices"] = t.coordinates[1];
    p.parts["values"] = t.values;
  } else if (format == "coo") {
    const int64_t nnz = t.values.numel();
    p.parts["indices"] = stack(t.coordinates, 0);
    p.parts["values"] = t.values;
    p.attributes["coalesced"] = coalesced(t.coordinates, nnz) ? "true" : "false";
  } else if (format == "bsr") {
    const int64_t bh = options.block_rows, bw = options.block_cols;
    p.parts["crow_indices"] = t.positions[1];
    p.parts["col_indices"] = t.coordinates[1];
    p.parts["values"] = t.values.reshape({-1, bh, bw});
  } else if (format == "blocked_ell") {
    const int64_t b = options.block_rows, block_rows = t.shape[0] / b;
    const int64_t slots = block_rows == 0 ? 0 : t.coordinates[1].numel() / block_rows;
    p.parts["ell_col_indices"] = t.coordinates[1].reshape({block_rows, slots});
    p.parts["values"] = builtin_values_of(t, format).reshape({t.shape[0], slots * b});
    p.attributes["block"] = str_cat(b, "x", b);
  } else {  // nm
    Shape slots = t.shape;
    slots.back() = t.shape.back() / options.m * options.n;
    p.parts["values"] = t.values.reshape(slots);
    p.parts["indices"] = t.coordinates.back().reshape(slots);
    p.attributes["n"] = std::to_string(options.n);
    p.attributes["m"] = std::to_string(options.m);
  }
  return format_spec(format, op).from_parts(p);
}

// Blocked-ELL's values: level order walks (block row, slot, row in the
// block, column in the block); cuSPARSE's (block row, row in the block, slot,
// column in the block).
Tensor builtin_values_of(const LevelTensor& t, std::string_view format) {
  if (format != "blocked_ell") return t.values;
  const int64_t b = t.format.block[0], block_rows = t.shape[0] / b;
  const int64_t slots = block_rows == 0 ? 0 : t.coordinates[1].numel() / block_rows;
  return t.values.reshape({block_rows, slots, b, b}).permute({0, 2, 1, 3}).contiguous().reshape({-1});
}

Tensor level_values_of(const Tensor& t) {
  const Tensor stored = values(t);
  if (t.format() != "blocked_ell") return stored.reshape({-1});
  const int64_t b = block_shape_of(t)->first, block_rows = t.size(0) / b;
  const int64_t slots = b == 0 ? 0 : stored.size(1) / b;
  return stored.reshape({block_rows, b, slots, b}).permute({0, 2, 1, 3}).contiguous().reshape({-1});
}

}  // namespace coppice::levels
