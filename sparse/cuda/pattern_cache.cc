#include "sparse/cuda/pattern_cache.h"

#include "sparse/bsr.h"
#include "sparse/csr.h"
#include "sparse/levels/level_impl.h"
#include "sparse/nm.h"

namespace coppice::sparse_cuda {

Tensor pattern_anchor(const Tensor& t) {
  if (const auto* b = t.impl_as<BsrImpl>()) return b->col_indices();
  if (const auto* c = t.impl_as<CompressedImpl>()) return c->indices();
  if (const auto* nm = t.impl_as<NmImpl>()) return nm->indices();
  if (const auto* level = t.impl_as<levels::LevelImpl>()) {
    for (const Tensor& part : level->tensor().coordinates) {
      if (part.defined()) return part;
    }
    for (const Tensor& part : level->tensor().positions) {
      if (part.defined()) return part;
    }
  }
  // COO, Masked, Blocked-ELL and any later format: a part that is not the
  // values, which with_values shares as the formats above do.
  const SparseImpl& impl = sparse_impl(t, "pattern_anchor");
  for (const auto& entry : impl.parts()) {
    if (!entry.second.is_same(impl.values())) return entry.second;
  }
  COPPICE_CHECK(false, "pattern_anchor: a ", t.format(), " tensor without index parts");
  return Tensor();
}

}  // namespace coppice::sparse_cuda
