// safetensors files holding named tensors of any format (dense or sparse).
//
// Convention (readable by any safetensors reader; no Coppice code needed):
//   * A dense tensor `x` is stored as-is, as the entry `x`.
//   * A sparse tensor `w` is stored as one dense entry per part, named
//     `w.<part>` (the part names of SparseImpl::parts()), plus string entries
//     in "__metadata__":
//       coppice.format.w       the format: coo csr csc bsr blocked_ell nm masked
//       coppice.shape.w        the logical shape, as JSON: "[4096, 4096]"
//       coppice.attr.w.<key>   the format's attributes (SparseImpl::attributes();
//                              a key has no '.', so <key> is what follows the last one)
//     Parts per format (see the format headers for dtypes and order):
//       coo          w.indices [ndim, nnz] i64, w.values [nnz]; attr coalesced
//       csr          w.crow_indices [rows+1] i32, w.col_indices [nnz] i32, w.values [nnz]
//       csc          w.ccol_indices [cols+1] i32, w.row_indices [nnz] i32, w.values [nnz]
//       bsr          w.crow_indices, w.col_indices (block columns), w.values [nblocks, bh, bw];
//                    attr block "BHxBW", nblocks
//       blocked_ell  w.ell_col_indices [rows/b, ell_cols] i32 (-1 padding),
//                    w.values [rows, ell_cols*b]; attr block "BxB" (required), ell_cols, nblocks
//       nm           w.values [..., G*n], w.indices [..., G*n] u8; attr n, m (required)
//       masked       w.values (dense, the shape), w.mask (bool, the shape)
//     For example, in PyTorch:
//       torch.sparse_csr_tensor(f["w.crow_indices"], f["w.col_indices"], f["w.values"], size)
//       torch.sparse_coo_tensor(f["w.indices"], f["w.values"], size)
//       torch.sparse_bsr_tensor(f["w.crow_indices"], f["w.col_indices"], f["w.values"], size)
//     with size = json.loads(metadata["coppice.shape.w"]).
//   * Metadata keys beginning with "coppice." are reserved; other metadata is
//     passed through.
//
// Loading rebuilds every sparse tensor through its validating factory
// (sparse_csr, sparse_coo, ...), so bad parts, a missing part or metadata
// entry, a shape that disagrees with the parts, or an unknown format give an
// error Status naming the file, the tensor and the problem; nothing throws.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/io/safetensors.h"
#include "tensor/tensor.h"

namespace coppice {

// A shape as its metadata entry's text, "[4096, 4096]" ("[]" for 0-d), and
// back: false unless the text is a list of non-negative integers (at most 18
// digits each). What the coppice.shape.<name> entries hold.
std::string shape_json(const Shape& shape);
bool parse_shape_json(const std::string& text, Shape& shape);

struct SparseSafetensorsFile {
  NamedTensors tensors;                         // CPU; in the file's order (a sparse
                                                // tensor where its first part is)
  std::map<std::string, std::string> metadata;  // user metadata ("coppice.*" removed)

  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Writes `tensors` (any format, any device) atomically (write_safetensors).
// Errors: duplicate names, names whose entries collide (a dense "w.values"
// beside a sparse "w"), metadata keys beginning with "coppice.".
absl::Status write_sparse_safetensors(const std::string& path, const NamedTensors& tensors,
                                      const std::map<std::string, std::string>& metadata = {});

// The file's bytes (what write_sparse_safetensors writes).
absl::StatusOr<std::string> serialize_sparse_safetensors(const NamedTensors& tensors,
                                                         const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file written by write_sparse_safetensors (or any
// file following the convention above; a file without coppice.* metadata is
// read as dense tensors).
absl::StatusOr<SparseSafetensorsFile> read_sparse_safetensors(const std::string& path);

// The same from bytes in memory; `source` names them in error messages.
absl::StatusOr<SparseSafetensorsFile> parse_sparse_safetensors(const std::string& bytes,
                                                               const std::string& source = "<memory>");

// The two halves of the above, for a caller that works on the plain entries
// in between (the checkpoint writer checksums them): the dense entries and
// metadata that stand for `tensors` in a file (what the writers write), and
// the tensors rebuilt from a plain file's entries (what the readers return).
absl::StatusOr<SafetensorsFile> flatten_sparse_tensors(const NamedTensors& tensors,
                                                       const std::map<std::string, std::string>& metadata = {});
absl::StatusOr<SparseSafetensorsFile> rebuild_sparse_tensors(SafetensorsFile file,
                                                             const std::string& source = "<memory>");

}  // namespace coppice
