// Elementwise ops, sums and the transpose on CUDA for every format of sparse/
// (sparse/ops.h has the table; the CPU twins are sparse/cpu/elementwise.cc,
// whose semantics these follow exactly). They are compositions of the dense
// CUDA kernels over the values and index parts, which stay on the device:
//  - zero-preserving unary ops and sparse ** scalar act on values();
//  - sparse * dense and sparse / dense sample the dense operand at each
//    slot's flat position (device_positions, cached per pattern version;
//    n:m by one gather, nm_products.h); slots that store nothing
//    (Blocked-ELL padding, masked-out elements) get 0;
//  - sparse +- dense and sums go through to_dense (their results are dense;
//    to_dense adds an uncoalesced COO's duplicates);
//  - COO +- COO concatenates the entries; CSR +- CSR is the CSR of both entry
//    lists, coalesced (the union of the patterns; with_values when both share
//    one pattern version).
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/nm_products.h"
#include "sparse/formats.h"
#include "sparse/ops/value_kernels.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

using binary_ops::Add;
using binary_ops::Div;
using binary_ops::Mul;
using binary_ops::Pow;
using binary_ops::Sub;
using sparse_kernels::SparseDensePair;

void check_cuda(const std::vector<Tensor>& in, std::string_view op) {
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.defined() && t.device().is_cuda() && t.device() == in[0].device(), op,
                  ": CUDA kernel needs every operand on one CUDA device");
  }
}

SparseDensePair sparse_dense_pair(const std::vector<Tensor>& in, std::string_view op) {
  check_cuda(in, op);
  return sparse_kernels::sparse_dense_pair(in, op);
}

// combine(values(s), d) (or d first) at the stored positions: mul or div;
// 0 where a slot stores nothing. A sampler per format cell: every format
// through its slots' flat positions, n:m by one gather where it can.
using Combine = Tensor (*)(const Tensor&, const Tensor&);

struct PositionsSampler {
  static Tensor sample(const SparseDensePair& p, std::string_view op, Combine combine) {
    const Tensor& s = p.sparse;
    const Tensor vals = values(s).contiguous();
    const Tensor pos = device_positions(s, op).reshape(vals.shape());
    const Tensor stored = ge(pos, 0.0);
    const Tensor flat = p.dense.expand(s.shape()).contiguous().reshape({s.numel()});
    const Tensor safe = where(stored, pos, zeros_like(pos));
    const Tensor d = index_select_trusted(flat, 0, safe.reshape({safe.numel()})).reshape(vals.shape());
    const Tensor a = p.sparse_first ? vals : d, b = p.sparse_first ? d : vals;
    const Tensor r = combine(a, b);
    return with_values(s, where(stored, r, zeros_like(r)));
  }
};

struct NmSampler {
  static Tensor sample(const SparseDensePair& p, std::string_view op, Combine combine) {
    const Tensor& s = p.sparse;
    if (p.dense.shape() != s.shape() || !is_floating(p.dense.dtype())) {
      return PositionsSampler::sample(p, op, combine);
    }
    // Every n:m slot stores a position: one gather, no position map.
    const Tensor vals = values(s).contiguous();
    const Tensor d = nm_sample(p.dense, s);
    const Tensor a = p.sparse_first ? vals : d, b = p.sparse_first ? d : vals;
    return with_values(s, combine(a, b));
  }
};

template <typename Sampler>
std::vector<Tensor> mul_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const SparseDensePair p = sparse_dense_pair(in, Mul::kName);
  if (p.dense.numel() == 1) return {with_values(p.sparse, mul(values(p.sparse), p.dense.reshape({})))};
  return {Sampler::sample(p, Mul::kName, mul)};
}

template <typename Sampler>
std::vector<Tensor> div_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const SparseDensePair p = sparse_dense_pair(in, Div::kName);
  if (p.dense.numel() == 1) return {with_values(p.sparse, div(values(p.sparse), p.dense.reshape({})))};
  return {Sampler::sample(p, Div::kName, div)};
}

std::vector<Tensor> add_sub(const std::vector<Tensor>& in, bool subtract, std::string_view op) {
  sparse_dense_pair(in, op);
  const Tensor a = to_dense(in[0]), b = to_dense(in[1]);
  return {subtract ? sub(a, b) : add(a, b)};
}

std::vector<Tensor> coo_concat(const std::vector<Tensor>& in, bool subtract, std::string_view op) {
  check_cuda(in, op);
  return sparse_kernels::coo_concat(in, subtract, op);
}

// CSR +- CSR over the union of the patterns.
std::vector<Tensor> csr_union(const std::vector<Tensor>& in, bool subtract, std::string_view op) {
  check_cuda(in, op);
  COPPICE_CHECK(in.size() == 2 && in[0].shape() == in[1].shape(), op,
                ": sparse operands must have one shape (no broadcasting)");
  const Tensor vb = subtract ? neg(values(in[1])) : values(in[1]);
  if (pattern_version(in[0]) == pattern_version(in[1])) return {with_values(in[0], add(values(in[0]), vb))};
  const Tensor both = coo_concat({compressed_to_coo(in[0]), compressed_to_coo(with_values(in[1], vb))}, false, op)[0];
  return {coo_to_csr(both)};
}

std::vector<Tensor> sum_kernel(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 1, "sum: expected 1 input, got ", in.size());
  const Tensor dense = to_dense(in[0]);
  std::vector<int64_t> dims = attrs.get_ints("dims");
  if (dims.empty()) {
    for (int64_t d = 0; d < dense.dim(); ++d) dims.push_back(d);
  }
  return {sum(dense, dims, attrs.get_bool("keepdim", false))};
}

void reg(std::string_view op, std::vector<std::string> formats, Kernel kernel) {
  Dispatcher::instance().register_kernel(std::string(op), DeviceType::kCuda, std::move(formats), std::move(kernel));
}

Kernel add_sub_kernel(bool subtract, std::vector<Tensor> (*fn)(const std::vector<Tensor>&, bool, std::string_view)) {
  return [subtract, fn](const std::vector<Tensor>& in, const Attrs&) {
    return fn(in, subtract, subtract ? Sub::kName : Add::kName);
  };
}

// sparse * dense, dense * sparse and sparse / dense for sparse format `f`.
template <typename Sampler>
void register_mul_div(const std::string& f) {
  reg(Mul::kName, {f, "dense"}, mul_kernel<Sampler>);
  reg(Mul::kName, {"dense", f}, mul_kernel<Sampler>);
  reg(Div::kName, {f, "dense"}, div_kernel<Sampler>);
}

const bool kRegistered = [] {
  for (const std::string& f : builtin_sparse_format_names()) {
    for (const std::string& op : sparse_kernels::zero_preserving_unary_ops()) {
      reg(op, {f}, sparse_kernels::unary_on_values(op));
    }
    register_mul_div<PositionsSampler>(f);
    reg(Pow::kName, {f, "dense"}, sparse_kernels::pow_on_values);
    for (const bool subtract : {false, true}) {
      reg(subtract ? Sub::kName : Add::kName, {f, "dense"}, add_sub_kernel(subtract, add_sub));
      reg(subtract ? Sub::kName : Add::kName, {"dense", f}, add_sub_kernel(subtract, add_sub));
    }
    reg(op::kSum, {f}, sum_kernel);
    reg(op::kTranspose, {f}, sparse_kernels::transpose);
  }
  register_mul_div<NmSampler>(format_name(Layout::kNm));  // replaces the cells registered above
  reg(op::kTranspose, {"dense"}, sparse_kernels::transpose);
  const std::string &coo = format_name(Layout::kCoo), &csr = format_name(Layout::kCsr);
  for (const bool subtract : {false, true}) {
    reg(subtract ? Sub::kName : Add::kName, {coo, coo}, add_sub_kernel(subtract, coo_concat));
    reg(subtract ? Sub::kName : Add::kName, {csr, csr}, add_sub_kernel(subtract, csr_union));
  }
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
