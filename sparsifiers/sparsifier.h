// The Sparsifier interface (docs/architecture.md, "Sparsifiers"): a sparsifier
// maps a tensor to a sparser one, in a requested format.
//
// Kinds, by cost:
//   streaming      one pass, O(1) state: keep-all, threshold, random fraction
//   materializing  needs the whole tensor (a selection): magnitude fraction,
//                  block magnitude fraction, movement
//   blocking       independent per group: n:m
//
// A sparsifier decides *which* entries survive (keep_mask) and *how much* a
// kept value is scaled (value_scale: 1, or 1/(1-p) for rescaled random
// dropping). apply() turns that into a tensor in the requested format. The
// built-ins are in builtin.h; a user adds one by name through registry.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sparse/convert.h"
#include "tensor/tensor.h"

namespace coppice {

enum class SparsifierKind { kStreaming, kMaterializing, kBlocking };
const char* sparsifier_kind_name(SparsifierKind kind);  // "streaming", ...

// A target format: "dense" (zeros where dropped) or any format name of
// sparse/convert.h, with its options (block shape, n and m).
struct OutputFormat {
  std::string name = "dense";
  FormatOptions options;
};

// What a sparsifier may depend on besides its input: the seed of random
// choices and the counter that makes each call's draw distinct. Random
// sparsifiers draw from Generator::keyed(seed, purpose, step, rank), so the
// same context gives the same mask on CPU and GPU and on every rank.
struct SparsifyContext {
  uint64_t seed = 0;
  uint64_t purpose = 0;  // e.g. a hash of the parameter or output name
  uint64_t step = 0;
  uint64_t rank = 0;
};

class Sparsifier {
 public:
  virtual ~Sparsifier() = default;

  // "magnitude(sparsity=0.9)": the name and parameters, for logs and errors.
  virtual std::string describe() const = 0;
  virtual SparsifierKind kind() const = 0;

  // The entries of `x` (dense, any shape unless the sparsifier says
  // otherwise) to keep: a bool tensor of x's shape on x's device.
  virtual Tensor keep_mask(const Tensor& x, const SparsifyContext& ctx) const = 0;

  // The factor by which kept values are multiplied (1 unless rescaling).
  virtual double value_scale() const { return 1.0; }

  // Empty when every output of this sparsifier fits `format` (for example
  // n:m output fits "nm" with the same m and n at least as large, and every
  // general format); otherwise the reason it does not. Schedules call this
  // when they are built, so that a bad combination fails before training.
  virtual std::string format_mismatch(const OutputFormat& format) const;

  // Empty when this sparsifier can take an input of `shape`; otherwise the
  // reason it cannot (a block or an n:m group that does not divide it).
  // Schedules call this for parameter rules when they are built, and job
  // validation for every ruled parameter, before any weight is touched.
  virtual std::string shape_mismatch(const Shape& /*shape*/) const { return ""; }

  // x's kept entries (times value_scale) as a tensor in `format`. A sparse
  // `x` is sparsified through its dense form; the result is on x's device,
  // in x's dtype.
  virtual Tensor apply(const Tensor& x, const OutputFormat& format, const SparsifyContext& ctx) const;
};

// Shared, not const: some sparsifiers keep state (movement scores).
using SparsifierPtr = std::shared_ptr<Sparsifier>;

}  // namespace coppice
