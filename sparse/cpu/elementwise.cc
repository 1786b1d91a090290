// Elementwise ops, sums and the transpose on the CPU for every format of
// sparse/ (sparse/ops.h has the table):
//  - zero-preserving unary ops act on values() and keep the pattern and its
//    version (with_values); ops with f(0) != 0 are not registered, so they
//    take the counted dense fallback;
//  - sparse * dense and sparse / dense keep the sparse pattern (the dense
//    operand broadcasts to the sparse shape and is read only where values
//    are stored), sparse +- dense is dense, sparse ** scalar keeps the
//    pattern for a positive exponent;
//  - COO +- COO concatenates the entries (an uncoalesced COO);
//  - sums reduce the stored values (in f64) into a dense result.
#include <vector>

#include "sparse/convert.h"
#include "sparse/cpu/util.h"
#include "sparse/formats.h"
#include "sparse/levels/level_routes.h"
#include "sparse/stored_positions.h"
#include "tensor/cpu/loops.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"

namespace coppice::sparse_cpu {
namespace {

// A row-major flat position in `shape` as an element offset under `strides`
// (0 along broadcast dims).
class BroadcastOffsets {
 public:
  BroadcastOffsets(Shape shape, Shape strides) : shape_(std::move(shape)), strides_(std::move(strides)) {}
  int64_t operator()(int64_t q) const {
    int64_t off = 0;
    for (size_t d = shape_.size(); d-- > 0;) {
      off += (q % shape_[d]) * strides_[d];
      q /= shape_[d];
    }
    return off;
  }

 private:
  Shape shape_, strides_;
};

void check_cpu(const std::vector<Tensor>& in, std::string_view op) {
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.device().is_cpu(), op, ": CPU kernel got an operand on ", t.device().to_string());
  }
}

using binary_ops::Add;
using binary_ops::Div;
using binary_ops::Mul;
using binary_ops::Pow;
using binary_ops::Sub;
using sparse_kernels::SparseDensePair;

SparseDensePair sparse_dense_pair(const std::vector<Tensor>& in, std::string_view op) {
  check_cpu(in, op);
  return sparse_kernels::sparse_dense_pair(in, op);
}

// values(s) op d (the functor of tensor/binary_ops.h) sampled at the stored
// positions, as with_values(s, ...).
template <typename Op>
Tensor sample(const SparseDensePair& p, Op op) {
  constexpr std::string_view op_name = Op::kName;
  const Tensor& s = p.sparse;
  const Tensor vals = values(s).contiguous();
  Tensor out = Tensor::empty(vals.shape(), vals.options());
  const std::vector<int64_t> pos = stored_positions(s);
  const Tensor d = p.dense.expand(s.shape());
  const BroadcastOffsets offsets(s.shape(), d.strides());
  dispatch_floating(s.dtype(), op_name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = cpu::compute_t<T>;
    const T* pv = vals.data<T>();
    const T* pd = static_cast<const T*>(d.data_ptr());
    T* po = out.data<T>();
    cpu::parallel_for(0, static_cast<int64_t>(pos.size()), cpu::kGrain, [&](int64_t s0, int64_t s1) {
      for (int64_t k = s0; k < s1; ++k) {
        const int64_t q = pos[static_cast<size_t>(k)];
        if (q < 0) {
          po[k] = T(C(0));
          continue;
        }
        const C a = static_cast<C>(pv[k]), b = static_cast<C>(pd[offsets(q)]);
        po[k] = T(p.sparse_first ? op(a, b) : op(b, a));
      }
    });
  });
  return with_values(s, out);
}

std::vector<Tensor> mul_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const SparseDensePair p = sparse_dense_pair(in, Mul::kName);
  if (p.dense.numel() == 1) return {with_values(p.sparse, mul(values(p.sparse), p.dense.reshape({})))};
  return {sample(p, Mul{})};
}

std::vector<Tensor> div_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const SparseDensePair p = sparse_dense_pair(in, Div::kName);
  if (p.dense.numel() == 1) return {with_values(p.sparse, div(values(p.sparse), p.dense.reshape({})))};
  return {sample(p, Div{})};
}

// Whether a format's stored positions can repeat, which decides whether
// add_sub may add them in parallel: one trait per format cell.
struct UniquePositions {  // every format but COO: a position is stored once
  static bool unique(const Tensor&, std::string_view) { return true; }
};
struct CooPositions {  // an uncoalesced COO repeats positions
  static bool unique(const Tensor& s, std::string_view op) { return coo_impl(s, op).is_coalesced(); }
};
struct MaybeRepeatedPositions {  // the formats declared by their levels: a non-unique level repeats them
  static bool unique(const Tensor&, std::string_view) { return false; }
};

// Dense result: the dense operand (negated for sparse - dense) plus or minus
// the stored values at their positions (duplicates of a COO add).
template <typename Positions>
std::vector<Tensor> add_sub(const std::vector<Tensor>& in, bool subtract, std::string_view op) {
  const SparseDensePair p = sparse_dense_pair(in, op);
  const Tensor& s = p.sparse;
  Tensor out = Tensor::empty(s.shape(), s.options());
  out.copy_(subtract && p.sparse_first ? neg(p.dense) : p.dense);
  const double sign = (subtract && !p.sparse_first) ? -1.0 : 1.0;
  const Tensor vals = values(s).contiguous();
  const std::vector<int64_t> pos = stored_positions(s);
  // Repeated positions are added by one thread.
  const bool unique = Positions::unique(s, op);
  dispatch_floating(s.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = cpu::compute_t<T>;
    const T* pv = vals.data<T>();
    T* po = out.data<T>();
    const C sg = static_cast<C>(sign);
    auto run = [&](int64_t s0, int64_t s1) {
      for (int64_t k = s0; k < s1; ++k) {
        const int64_t q = pos[static_cast<size_t>(k)];
        if (q >= 0) po[q] = T(static_cast<C>(po[q]) + sg * static_cast<C>(pv[k]));
      }
    };
    if (unique) {
      cpu::parallel_for(0, static_cast<int64_t>(pos.size()), cpu::kGrain, run);
    } else {
      run(0, static_cast<int64_t>(pos.size()));
    }
  });
  return {out};
}

// "sum": attrs dims (the reduced dims, normalized; empty = all) and keepdim.
std::vector<Tensor> sum_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kSum;
  COPPICE_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
  check_cpu(in, op);
  const Tensor& s = in[0];
  const int64_t ndim = s.dim();
  std::vector<int64_t> dims = attrs.get_ints("dims");
  const bool keepdim = attrs.get_bool("keepdim", false);
  std::vector<bool> reduced(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    COPPICE_CHECK(d >= 0 && d < ndim, op, ": dim ", d, " out of range for ", ndim, "-D input");
    reduced[static_cast<size_t>(d)] = true;
  }
  Shape out_shape, kept_sizes;
  std::vector<int64_t> kept_stride(static_cast<size_t>(ndim), 0);  // per input dim, in the output's flat index
  int64_t stride = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    if (!reduced[static_cast<size_t>(d)]) {
      kept_stride[static_cast<size_t>(d)] = stride;
      stride *= s.size(d);
    }
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[static_cast<size_t>(d)]) {
      out_shape.push_back(s.size(d));
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  const int64_t out_numel = stride;
  const Tensor vals = values(s).contiguous();
  const std::vector<int64_t> pos = stored_positions(s);
  const int64_t slots = static_cast<int64_t>(pos.size());
  std::vector<double> total(static_cast<size_t>(out_numel), 0.0);
  dispatch_floating(s.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pv = vals.data<T>();
    auto accumulate = [&](int64_t s0, int64_t s1, double* acc) {
      for (int64_t k = s0; k < s1; ++k) {
        int64_t q = pos[static_cast<size_t>(k)];
        if (q < 0) continue;
        int64_t o = 0;
        for (int64_t d = ndim - 1; d >= 0; --d) {
          const int64_t size = s.shape()[static_cast<size_t>(d)];
          o += (q % size) * kept_stride[static_cast<size_t>(d)];
          q /= size;
        }
        acc[o] += static_cast<double>(static_cast<cpu::compute_t<T>>(pv[k]));
      }
    };
    // Chunks sum into their own totals when those are small next to the work.
    const int64_t chunks = std::min<int64_t>(4 * cpu::num_threads(), slots / cpu::kGrain + 1);
    if (chunks <= 1 || out_numel * chunks > slots) {
      accumulate(0, slots, total.data());
      return;
    }
    std::vector<std::vector<double>> partial(static_cast<size_t>(chunks));
    const int64_t per = (slots + chunks - 1) / chunks;
    cpu::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        partial[static_cast<size_t>(c)].assign(static_cast<size_t>(out_numel), 0.0);
        accumulate(c * per, std::min(slots, (c + 1) * per), partial[static_cast<size_t>(c)].data());
      }
    });
    for (const std::vector<double>& part : partial) {
      for (int64_t o = 0; o < out_numel; ++o) total[static_cast<size_t>(o)] += part[static_cast<size_t>(o)];
    }
  });
  Tensor out = Tensor::empty({out_numel}, TensorOptions(DType::kF64));
  std::copy(total.begin(), total.end(), out.data<double>());
  return {out.to(s.dtype()).reshape(out_shape)};
}

// sparse +- dense and dense +- sparse for sparse format `f`.
template <typename Positions>
void register_add_sub(const std::string& f) {
  register_cpu(Add::kName, {{f, "dense"}, {"dense", f}},
               [](const std::vector<Tensor>& in, const Attrs&) { return add_sub<Positions>(in, false, Add::kName); });
  register_cpu(Sub::kName, {{f, "dense"}, {"dense", f}},
               [](const std::vector<Tensor>& in, const Attrs&) { return add_sub<Positions>(in, true, Sub::kName); });
}

const bool kRegistered = [] {
  for (const std::string& f : builtin_sparse_format_names()) {
    for (const std::string& op : sparse_kernels::zero_preserving_unary_ops()) {
      register_cpu(op, {{f}}, sparse_kernels::unary_on_values(op));
    }
    register_cpu(Mul::kName, {{f, "dense"}, {"dense", f}}, mul_kernel);
    register_cpu(Div::kName, {{f, "dense"}}, div_kernel);
    register_cpu(Pow::kName, {{f, "dense"}}, sparse_kernels::pow_on_values);
    register_add_sub<UniquePositions>(f);
    register_cpu(op::kSum, {{f}}, sum_kernel);
    register_cpu(op::kTranspose, {{f}}, sparse_kernels::transpose);
  }
  // The formats declared by their levels, as a family: what is linear in the
  // stored values (a repeated position's values add), so no unary op, whose
  // f(a) + f(b) is not f(a + b).
  const std::string levels(kLevelFamily);
  register_cpu(Mul::kName, {{levels, "dense"}, {"dense", levels}},
               levels::through_builtin_kernels(Mul::kName, mul_kernel));
  register_cpu(Div::kName, {{levels, "dense"}}, levels::through_builtin_kernels(Div::kName, div_kernel));
  for (const bool subtract : {false, true}) {
    const std::string name = subtract ? Sub::kName : Add::kName;
    register_cpu(name, {{levels, "dense"}, {"dense", levels}},
                 levels::through_builtin_kernels(name, [subtract, name](const std::vector<Tensor>& in, const Attrs&) {
                   return add_sub<MaybeRepeatedPositions>(in, subtract, name);
                 }));
  }
  register_cpu(op::kSum, {{levels}}, levels::through_builtin_kernels(op::kSum, sum_kernel));
  const std::string& coo = format_name(Layout::kCoo);
  register_add_sub<CooPositions>(coo);  // replaces the cells registered above
  register_cpu(op::kTranspose, {{"dense"}}, sparse_kernels::transpose);
  register_cpu(Add::kName, {{coo, coo}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_cpu(in, Add::kName);
    return sparse_kernels::coo_concat(in, false, Add::kName);
  });
  register_cpu(Sub::kName, {{coo, coo}}, [](const std::vector<Tensor>& in, const Attrs&) {
    check_cpu(in, Sub::kName);
    return sparse_kernels::coo_concat(in, true, Sub::kName);
  });
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cpu
