// A format declared by its levels, usable by name wherever a built-in one
// is: register_level_format adds a row to the format table (sparse/formats.h)
// whose tensors are LevelImpls. Everything the row needs comes from the
// declaration (level_tensor.h): building from a mask, the stored positions
// (so mask updates and the position-based kernels take it), the unit a mask
// update changes, the parts it is saved as and their check, its dense form.
// Its tensors are of the kernel family kLevelFamily: the generic CPU kernels
// registered for the family (sparse/cpu: SpMM and linear by stored
// positions, SDDMM, elementwise ops linear in the values, sums) serve every
// level format; a kernel registered under a format's own name comes first.
// A tensor's parts live on its device. On a GPU the family's CUDA cells
// (sparse/cuda/level_cells.cc) run a built-in format's declaration on that
// format's kernels and the BSR-of-2:4 hybrid's linear on its tensor-core
// kernel; there are no generic CUDA kernels, so any other declaration's op
// fails there, naming the format. Host walks (checks, stored positions,
// building from a mask) copy the parts to the CPU (issue 35).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "sparse/formats.h"
#include "sparse/levels/level_tensor.h"
#include "sparse/sparse_impl.h"

namespace coppice::levels {

class LevelImpl final : public SparseImpl {
 public:
  // `tensor` must be checked (check_level_tensor); `name` its registered format's.
  LevelImpl(std::string name, LevelTensor tensor, uint64_t pattern_version);

  Layout layout() const override { return Layout::kCustom; }
  std::string_view format() const override { return name_; }
  std::string_view kernel_family() const override { return kLevelFamily; }
  int64_t nnz() const override { return nnz_; }  // stored entries, padding excluded
  const Tensor& values() const override { return tensor_.values; }
  SparseParts parts() const override;  // level_parts': positions_k, coordinates_k, values
  // "levels": the declaration, as describe writes it.
  std::map<std::string, std::string> attributes() const override;
  Tensor with_values(const Tensor& values) const override;
  Tensor to_dense() const override;
  Tensor to(TensorOptions options) const override;

  const LevelTensor& tensor() const { return tensor_; }
  const LevelFormat& declaration() const { return tensor_.format; }
  // This tensor as the built-in format whose declaration its own is
  // (builtin_format_of: "(dense, compressed)" is CSR's), its parts viewed
  // without a copy (Blocked-ELL's values reordered); nullopt when none is.
  // The built-in pattern is checked once per pattern and shared by the
  // tensors with_values and to make, so a kernel routed through it pays
  // for no check per call.
  std::optional<Tensor> as_builtin() const;

 private:
  struct BuiltinPattern;  // as_builtin's, per pattern
  LevelImpl(std::string name, LevelTensor tensor, uint64_t pattern_version, int64_t nnz,
            std::shared_ptr<BuiltinPattern> builtin);

  std::string name_;
  LevelTensor tensor_;
  int64_t nnz_;
  std::shared_ptr<BuiltinPattern> builtin_;
};

// Adds the format `name`, declared by `format`, to the format table (a row
// of layout kCustom, no options: the block is the declaration's). Registering
// a name again with the same declaration (same_levels, same values dtype)
// does nothing, so a job, a resumed job and a test may each declare it;
// another declaration under a taken name, a built-in or another user's
// format name, an empty name or a declaration check_level_format refuses
// throws naming `op`. A format holds any pattern unless a level is
// n_out_of_m; its mask updates change whole blocks when every level inside
// the block is dense, else single entries. A declaration whose last level
// groups the last dimension n:m below dense levels in order (nm's own,
// whatever its dtypes) has the nm format's groups (FormatSpec::nm_groups):
// mask updates regrow inside them and SR-STE projects onto it.
void register_level_format(const std::string& name, const LevelFormat& format, std::string_view op);

// The declaration registered under `name` by register_level_format, or
// nullopt (a built-in name, another user's format, an unknown name).
std::optional<LevelFormat> registered_level_format(std::string_view name);
// The names register_level_format has added, in registration order.
std::vector<std::string> level_format_names();

// A tensor of the registered level format `name` from a level tensor of its
// declaration (checked, naming `op`); a fresh pattern version.
Tensor level_format_tensor(const std::string& name, LevelTensor tensor, std::string_view op);
// The LevelImpl of `t`, or throws naming `op` and t's format.
const LevelImpl& level_impl(const Tensor& t, std::string_view op);

}  // namespace coppice::levels
