// The pattern of a sparse parameter as flat positions, and rebuilding the
// parameter on a new pattern (docs/architecture.md, "Compact training state").
//
// Mask updates (mask_updater.h, gmp.h) decide on positions; this file turns
// a decision back into a parameter in its own format: surviving values are
// copied bit for bit, regrown ones start at zero (or at what a RegrowInit
// returns), and `keep_from` tells the optimizer which old slot each new slot
// came from (-1: new entry) so that it can remap its nnz-sized state.
//
// Formats: COO (coalesced), CSR, CSC and masked, entry by entry; BSR and
// Blocked-ELL block by block (a mask update keeps, drops and grows whole
// blocks: block_view). n:m and dense parameters are refused with a message
// naming the format.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace coppice {

// The stored entries of a sparse parameter, by ascending flat position.
struct PatternView {
  Shape shape;
  std::vector<int64_t> positions;  // ascending row-major flat positions
  std::vector<int64_t> slots;      // slots[i]: index into values(param) flattened, holding positions[i]
  int64_t value_slots = 0;         // values(param).numel() (padding included)
  // The unit of a mask update: 1x1 for element formats, the block of BSR and Blocked-ELL.
  int64_t block_rows = 1, block_cols = 1;
  bool blocked() const { return block_rows > 1 || block_cols > 1; }
  int64_t numel() const { return shape_numel(shape); }
  int64_t nnz() const { return static_cast<int64_t>(positions.size()); }
};

// Throws naming `op` for dense parameters, block/group formats, and
// uncoalesced COO with repeated positions.
PatternView pattern_view(const Tensor& param, std::string_view op);

// The same pattern over blocks: shape [rows / block_rows, cols /
// block_cols], positions the stored blocks' row-major indices (slots[i] = i).
PatternView block_view(const PatternView& elements);
// Every element position of the given blocks (ascending block indices of
// block_view(elements)), ascending.
std::vector<int64_t> expand_blocks(const std::vector<int64_t>& blocks, const PatternView& elements);

// block_view(pattern_view(param)) of a BSR parameter, read from its block
// indices alone (no entry is visited): what a mask update of a large BSR
// weight walks instead of its millions of entries.
PatternView bsr_block_view(const Tensor& param, std::string_view op);

// Values for regrown entries: given the parameter (before the update) and
// the grown flat positions (ascending), returns a tensor of positions.size()
// values (any floating dtype and device; converted to the parameter's).
using RegrowInit = std::function<Tensor(const Tensor& param, const std::vector<int64_t>& positions)>;

struct MaskChange {
  Tensor param;  // the new parameter, same format, dtype and device; a fresh pattern version
  // i64, one per slot of values(param): the old slot, or -1 for a new entry.
  // On the CPU, except rebuild_bsr_blocks's, which is on the parameter's device.
  Tensor keep_from;
  std::vector<int64_t> dropped;  // flat positions, ascending
  std::vector<int64_t> grown;    // flat positions, ascending
};

// Rebuilds `param` (whose pattern is `old`) to store exactly `kept` (a
// subset of old.positions) and `grown` (disjoint from `kept`), both
// ascending. Survivors keep their values bit for bit; grown entries get
// init(param, grown), or zeros when `init` is empty.
MaskChange rebuild_pattern(const Tensor& param, const PatternView& old, const std::vector<int64_t>& kept,
                           const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op);

// Whether `param` is BSR in blocks larger than 1x1: its mask changes walk
// blocks (bsr_block_view, rebuild_bsr_blocks), never its entries.
bool is_blocked_bsr(const Tensor& param);

// rebuild_pattern for a BSR parameter, block by block: `kept` (a subset of
// blocks.positions, from bsr_block_view) and `grown` are ascending block
// indices of the grid; init, when given, is asked for the grown entries' flat
// positions as rebuild_pattern asks. The result is rebuild_pattern's for the
// same blocks, except that dropped and grown are block indices of the grid
// too (expand_blocks gives the entries), made without a dense mask or a walk
// over the entries: indices are built per block and the values and keep_from
// are formed block by block on the parameter's device.
MaskChange rebuild_bsr_blocks(const Tensor& param, const PatternView& blocks, const std::vector<int64_t>& kept,
                              const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op);

// rebuild_pattern for an n:m parameter whose new pattern keeps n per group
// (kept and grown as group_regrow.h picks them): the indices are built group
// by group in one pass and the values gathered on the parameter's device,
// without a dense mask or a search per entry. The result is rebuild_pattern's.
MaskChange rebuild_nm(const Tensor& param, const PatternView& old, const std::vector<int64_t>& kept,
                      const std::vector<int64_t>& grown, const RegrowInit& init, std::string_view op);

// A stable 64-bit key for a parameter name (FNV-1a), for the `purpose` word
// of Generator::keyed: the same on every build, device and rank.
uint64_t name_purpose(std::string_view name);

// FNV-1a over a pattern's shape and ascending positions: replicas compare
// it to check that their masks have not drifted.
uint64_t pattern_checksum(const Tensor& param);

// A bool CPU tensor of `shape`, true at `positions`.
Tensor mask_from_positions(const Shape& shape, const std::vector<int64_t>& positions);

}  // namespace coppice
