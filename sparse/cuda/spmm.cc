// SpMM on CUDA for every format of sparse/, in both directions (sparse/ops.h
// has the table): "matmul" (fmt, dense), (dense, fmt); "linear" (dense, fmt),
// (fmt, dense); and, with the bias (and relu) in the kernel where the route
// can, "linear" (dense, bsr, dense) and "linear_relu" (dense, bsr[, dense]);
// "linear_gelu" (dense, bsr|nm[, dense]) and "matmul_gelu_backward" (dense,
// bsr|nm, dense), a transformer MLP's activation in the write-out (the erf
// gelu, or with the attribute "tanh" GPT-2's tanh approximation).
//
// The SpMM planner: every entry states its product as op(S) @ X or
// X @ op(S) (Product) and runs the first route of kRoutes that takes it
// (kernel_routes.h):
//   nm24_mma         2:4 in bf16/f16 on sparse tensor cores (nm_products.h):
//                    X @ S^T with the bias and relu in the write-out, and
//                    X @ S where the pattern is transposable; or the dense
//                    op on the decompressed weight (a linear's bias and
//                    relu in cuBLASLt's epilogue) where that measured
//                    faster for the shape (the decision nm24 of
//                    sparse/route_choices.h; the gelu forms timed apart);
//   dense_nm         n:m with n/m >= 1/8: the product on the dense form
//                    (csr_view.h's multiplies_densely), decompressed in one
//                    kernel (nm_products.h);
//   bsr_mma          BSR with square 16/32/64 blocks in bf16/f16, or f32 on
//                    TF32 tensor cores: the mma.sync kernels, every
//                    direction, bias and relu (and the gelu forms) in the
//                    write-out (bsr_products.h);
//   bsr_tiles        BSR with 16/32-wide blocks in f32/bf16/f16: the WMMA /
//                    FMA tiles, the same directions and write-out but gelu
//                    (bsr_products.h). The pin bsr_tiles=tiles takes them
//                    where bsr_mma would run too, bsr_tiles=off neither;
//   masked_dense     masked: computed densely (values where the mask holds),
//                    by design;
//   blocked_ell      S @ X with S Blocked-ELL in bf16/f16: cuSPARSE's
//                    Blocked-ELL SpMM (it takes no transposed operand, and
//                    would compute f32 in TF32, a silent loss of precision);
//                    where cuSPARSE refuses, the routes below;
//   block_kernels    S @ X with S BSR or n:m: the own kernels of block_spmm.cc
//                    (cuSPARSE's BSR SpMM wants square blocks and has no n:m);
//   row_major_csr    everything else: one non-transposed, row-major CSR SpMM
//                    (row_major_spmm below), by cuSPARSE or an own kernel,
//                    whichever measured faster for the shape (spmm_choice.h).
// A route that cannot fuse the bias and relu gets them applied after it.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse/csr.h"
#include "sparse/cuda/block_kernel_spmm.h"
#include "sparse/cuda/bsr_products.h"
#include "sparse/cuda/csr_view.h"
#include "sparse/cuda/cusparse_internal.h"
#include "sparse/cuda/cusparse_spmm.h"
#include "sparse/cuda/kernel_routes.h"
#include "sparse/cuda/kernel_timing.h"
#include "sparse/cuda/nm_products.h"
#include "sparse/cuda/spmm_choice.h"
#include "sparse/formats.h"
#include "sparse/route_choices.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

// The four products with one sparse operand S and one dense X.
enum class Product { kSparseDense, kSparseTDense, kDenseSparse, kDenseSparseT };

bool sparse_left(Product p) { return p == Product::kSparseDense || p == Product::kSparseTDense; }

// Whether the product states S transposed (op(S) = S^T).
bool states_transpose(Product p) { return p == Product::kSparseTDense || p == Product::kDenseSparseT; }

// One product for the planner: op(S) @ X or X @ op(S), then + bias (a
// feature vector, optional) and relu when asked.
struct SpmmProblem {
  const Tensor& s;
  const Tensor& x;
  Product product;
  std::string_view op;
  const Tensor& bias;
  bool relu = false;
};

bool is_half(DType d) { return d == DType::kBF16 || d == DType::kF16; }

// The product on dense tensors.
Tensor dense_product(const Tensor& s, const Tensor& x, Product product) {
  switch (product) {
    case Product::kSparseDense: return matmul(s, x);
    case Product::kSparseTDense: return matmul(s.t(), x);
    case Product::kDenseSparse: return matmul(x, s);
    case Product::kDenseSparseT: return matmul(x, s.t());
  }
  fail("spmm: internal: unknown product");
}

// `a`, or a^T when `transposed`, as a CSR tensor that cuSPARSE reads without
// transposing: CSR as it is, CSC transposed over the same arrays, anything
// else through csr_view; the transposed pattern of a CSR is the CSR view of
// its free CSC transpose, cached per pattern version like every view.
Tensor csr_operand(const Tensor& a, bool transposed, std::string_view op) {
  switch (a.layout()) {
    case Layout::kCsr: return transposed ? csr_view(transpose_compressed(a), op) : a;
    case Layout::kCsc: return transposed ? transpose_compressed(a) : csr_view(a, op);
    default: {
      const Tensor base = csr_view(a, op);
      return transposed ? csr_view(transpose_compressed(base), op) : base;
    }
  }
}

// CSR @ X, the product the row-major route comes down to: cuSPARSE or an own
// kernel, whichever measured faster for the shape (spmm_choice.h;
// RuntimeOptions::csr_spmm forces a side).
Tensor csr_times_dense(const Tensor& csr, const Tensor& x, std::string_view op) {
  return csr_spmm_chosen(csr, x, op, [op](const Tensor& s, const Tensor& d) { return cusparse_csr_spmm(s, d, op); });
}

// Every product as one non-transposed, row-major CSR SpMM, which is where
// cuSPARSE is fast: a transposed sparse operand makes it scatter with
// atomics, and column-major dense operands run several times slower (H100,
// 4096^2 at 90 % sparsity times 4096^2, f32: x @ S^T column-major 15 ms and
// x @ S through S^T 66 ms, against 3.3 ms for S @ x row-major). So
//   op(S) @ X  = CSR(op(S)) @ X
//   X @ op(S)  = (CSR(op(S)^T) @ X^T)^T
// with X^T and the result's transpose made by dense copies (a small cost
// next to the product) and CSR(S^T) a cached view.
Tensor row_major_spmm(const SpmmProblem& p) {
  const Tensor &a = p.s, &x = p.x;
  const bool left = sparse_left(p.product);
  // M = op(S) as the caller states it.
  const bool m_is_transpose = states_transpose(p.product);
  const int64_t m_rows = m_is_transpose ? a.size(1) : a.size(0), m_cols = m_is_transpose ? a.size(0) : a.size(1);
  COPPICE_CHECK(left ? x.size(0) == m_cols : x.size(1) == m_rows, p.op, ": inner dimensions differ: sparse ",
                shape_to_string(a.shape()), m_is_transpose ? " (transposed)" : "", " and dense ",
                shape_to_string(x.shape()), left ? " on the right" : " on the left");
  if (left) return csr_times_dense(csr_operand(a, m_is_transpose, p.op), x, p.op);
  // X @ M = (M^T @ X^T)^T.
  return csr_times_dense(csr_operand(a, !m_is_transpose, p.op), x.t(), p.op).t().contiguous();
}

Tensor dense_nm_spmm(const SpmmProblem& p) { return dense_product(nm_dense(p.s), p.x, p.product); }

// A launcher that computes only the product, with the bias and relu after it.
template <Tensor (*Launch)(const SpmmProblem&)>
Tensor then_bias_relu(const SpmmProblem& p) {
  Tensor y = Launch(p);
  if (p.bias.defined()) y = add(y, p.bias);
  return p.relu ? relu(y) : y;
}

// The tensor-core kernel of a 2:4 product whose sparse operand, as the
// kernel multiplies it, is S (transposed: S^T, packed at the call): sparse
// wgmma where it runs (Hopper), unless the pin nm24=mma_sp asks for mma.sp,
// the kernel of every other GPU.
Nm24Kernel nm24_kernel(const Tensor& s, bool transposed) {
  if (route_pin("nm24") != "mma_sp" && nm24_kernel_runs(Nm24Kernel::kWgmma, s, transposed)) return Nm24Kernel::kWgmma;
  return Nm24Kernel::kMmaSp;
}

Tensor nm24_matmul_spmm(const SpmmProblem& p) { return nm24_matmul(nm24_kernel(p.s, true), p.x, p.s); }

// 2:4 on sparse tensor cores: X @ S^T and X @ S of a 2-D X (the two products
// of a linear layer's input side).
bool nm24_applies(const SpmmProblem& p) {
  if (p.x.dim() != 2 || p.x.dtype() != p.s.dtype()) return false;
  if (p.product == Product::kDenseSparseT) return nm24_takes(p.s);
  return p.product == Product::kDenseSparse && nm24_transposable(p.s);
}

Tensor nm24_spmm(const SpmmProblem& p) {
  const bool linear = p.product == Product::kDenseSparseT;
  const int64_t inner = linear ? p.s.size(1) : p.s.size(0), out = linear ? p.s.size(0) : p.s.size(1);
  COPPICE_CHECK(p.x.size(1) == inner, p.op, ": inner dimensions differ: dense ", shape_to_string(p.x.shape()),
                " and sparse ", shape_to_string(p.s.shape()), linear ? " (transposed)" : "");
  if (p.bias.defined()) {
    COPPICE_CHECK(p.bias.is_dense() && p.bias.dim() == 1 && p.bias.size(0) == out && p.bias.dtype() == p.s.dtype() &&
                      p.bias.device() == p.s.device(),
                  p.op, ": bias must be dense [", out, "] of ", dtype_name(p.s.dtype()), " on ",
                  p.s.device().to_string(), ", got ", shape_to_string(p.bias.shape()), " ", dtype_name(p.bias.dtype()));
  }
  if (linear) return nm24_linear(nm24_kernel(p.s, false), p.x, p.s, p.bias, p.relu);
  return then_bias_relu<nm24_matmul_spmm>(p);
}

// The 2:4 product on sparse tensor cores or the dense way (the next route's):
// the decision nm24 (sparse/route_choices.h) keeps the faster for the shape
// unless pinned (each side timed twice: one timing each once picked the
// kernel that ran 35 % slower, H200 bench spmm). Neither always wins: on the
// H200 the sparse wgmma kernel runs x @ W^T at 1.16-1.19x cuBLAS's dense rate
// but dy @ W, whose W^T is packed at every call, near it; and shapes with few
// rows leave its 256 x 128 tiles part empty.
std::string nm24_choice_key(const SpmmProblem& p) {
  return str_cat(device_model_key(p.s.device().index), "|", static_cast<int>(p.product), "|", p.x.size(0), "x",
                 shape_to_string(p.s.shape()), "|", dtype_name(p.s.dtype()), p.bias.defined() ? "|bias" : "",
                 p.relu ? "|relu" : "");
}

// The dense side of that choice: the weight decompressed, then the dense
// op, so that a linear's bias and relu land in cuBLASLt's epilogue as they
// do for a dense weight. With the product and a pass for each, the dense side
// lost the comparison where it was faster: the GPT's 2:4 forward products at
// K = 1024 took the sparse kernel at 1.4x cuBLAS's time (H200, Nsight
// Compute: qkv 212 us a layer, the epilogue GEMM about 140).
Tensor nm24_dense_side(const SpmmProblem& p) {
  if (p.product != Product::kDenseSparseT) return then_bias_relu<dense_nm_spmm>(p);
  const Tensor w = nm_dense(p.s);
  return p.relu ? linear_relu(p.x, w, p.bias) : linear(p.x, w, p.bias);
}

std::vector<TimedRoute> nm24_routes(const SpmmProblem& p) {
  return {{"sparse", [&p] { return nm24_spmm(p); }}, {"dense", [&p] { return nm24_dense_side(p); }}};
}

// Whether the pin nm24 sends a 2:4 product to sparse tensor cores ("sparse",
// or "mma_sp": nm_products.h reads which) or to the dense side ("dense");
// nullopt unpinned, where the product's choice is measured.
std::optional<bool> nm24_pinned_sparse() {
  const std::optional<std::string> pin = route_pin("nm24");
  if (!pin.has_value()) return std::nullopt;
  return pin != "dense";
}

Tensor nm24_or_dense(const SpmmProblem& p) {
  if (const std::optional<bool> sparse = nm24_pinned_sparse()) return *sparse ? nm24_spmm(p) : nm24_dense_side(p);
  return run_chosen_route("nm24", nm24_choice_key(p), p.s.device().index, p.op, nm24_routes(p), /*rounds=*/2);
}

// Whether a gelu form of the 2:4 product p (linear_gelu, matmul_gelu_backward)
// takes sparse tensor cores: `sparse` (the fused write-out) timed against
// `dense` (the dense op on the decompressed weight: cuBLASLt's epilogue for
// the tanh form, the product and a pass for erf) under the decision nm24, the
// form in the key. Following the plain product's choice instead left out the
// pass the fused path saves: at the GPT's K = 1024 the plain products came out
// level and the MLP's gelu went to a pass of its own.
bool nm24_gelu_takes_sparse(const SpmmProblem& p, GeluForm form, const std::vector<TimedRoute>& routes) {
  if (const std::optional<bool> sparse = nm24_pinned_sparse()) return *sparse;
  const std::string key = str_cat(nm24_choice_key(p), "|gelu_", form == GeluForm::kTanh ? "tanh" : "erf");
  return chosen_route("nm24", key, p.s.device().index, p.op, routes, /*rounds=*/2) == 0;
}

// The BSR kernel for S: mma.sync where it takes S, else the tiles where
// they do, unless pinned (bsr_tiles=tiles: the tiles wherever they take S;
// off: neither); nullopt: neither runs S.
std::optional<BsrKernel> bsr_kernel(const Tensor& s) {
  const std::optional<std::string> pin = route_pin("bsr_tiles");
  if (pin == "off") return std::nullopt;
  if (pin != "tiles" && bsr_kernel_takes(BsrKernel::kMmaSync, s)) return BsrKernel::kMmaSync;
  if (bsr_kernel_takes(BsrKernel::kTiles, s)) return BsrKernel::kTiles;
  return std::nullopt;
}

template <BsrKernel kKernel>
bool bsr_kernel_is(const SpmmProblem& p) {
  return bsr_kernel(p.s) == kKernel;
}

template <BsrKernel kKernel>
Tensor bsr_spmm(const SpmmProblem& p) {
  return bsr_matmul(kKernel, p.s, states_transpose(p.product), p.x, sparse_left(p.product), p.op, p.bias, p.relu);
}

Tensor masked_spmm(const SpmmProblem& p) { return dense_product(to_dense(p.s), p.x, p.product); }

Tensor blocked_ell_spmm(const SpmmProblem& p) { return cusparse_spmm(p.s, p.x, p.op); }

Tensor block_kernels_spmm(const SpmmProblem& p) { return block_kernel_spmm(p.s, p.x, p.op); }

using SpmmRoute = KernelRoute<SpmmProblem>;

// The SpMM routes, in the order they are tried (the header has the table).
const SpmmRoute kRoutes[] = {
    {"nm24_mma", nm24_applies, nm24_or_dense},
    {"dense_nm", [](const SpmmProblem& p) { return multiplies_densely(p.s); }, then_bias_relu<dense_nm_spmm>},
    {"bsr_mma", bsr_kernel_is<BsrKernel::kMmaSync>, bsr_spmm<BsrKernel::kMmaSync>},
    {"bsr_tiles", bsr_kernel_is<BsrKernel::kTiles>, bsr_spmm<BsrKernel::kTiles>},
    {"masked_dense", [](const SpmmProblem& p) { return p.s.layout() == Layout::kMasked; }, then_bias_relu<masked_spmm>},
    {"blocked_ell",
     [](const SpmmProblem& p) {
       return p.s.layout() == Layout::kBlockedEll && is_half(p.s.dtype()) && p.product == Product::kSparseDense;
     },
     then_bias_relu<blocked_ell_spmm>, /*may_be_refused=*/true},
    {"block_kernels",
     [](const SpmmProblem& p) {
       return (p.s.layout() == Layout::kBsr || p.s.layout() == Layout::kNm) && p.product == Product::kSparseDense;
     },
     then_bias_relu<block_kernels_spmm>},
    {"row_major_csr", [](const SpmmProblem&) { return true; }, then_bias_relu<row_major_spmm>},
};

Tensor spmm(const Tensor& s, const Tensor& x, Product product, std::string_view op, const Tensor& bias = Tensor(),
            bool relu = false) {
  return run_first_route<SpmmProblem>(kRoutes, SpmmProblem{s, x, product, op, bias, relu});
}

std::vector<Tensor> matmul_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_cuda_operand_pair(in, op::kMatmul);
  return {spmm(in[0], in[1], Product::kSparseDense, op::kMatmul)};
}

std::vector<Tensor> matmul_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_cuda_operand_pair(in, op::kMatmul);
  return {spmm(in[1], in[0], Product::kDenseSparse, op::kMatmul)};
}

// linear(x, weight) = x @ weight^T (the frontend adds the bias).
std::vector<Tensor> linear_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  check_cuda_operand_pair(in, op::kLinear);
  return {spmm(in[1], in[0], Product::kDenseSparseT, op::kLinear)};
}

// linear(s, w) = s @ w^T (the frontend adds the bias).
std::vector<Tensor> linear_sparse_dense(const std::vector<Tensor>& in, const Attrs&) {
  check_cuda_operand_pair(in, op::kLinear);
  return {spmm(in[0], in[1].t(), Product::kSparseDense, op::kLinear)};
}

// linear(x, weight, bias) with a BSR or n:m weight: the bias added in the
// kernel's write-out instead of a separate pass where the route can (the
// frontend asks for this kernel when it exists and a bias is given).
std::vector<Tensor> linear_dense_sparse_bias(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 3, "linear: expected 3 inputs (input, weight, bias), got ", in.size());
  check_cuda_operand_pair({in[0], in[1]}, op::kLinear);
  return {spmm(in[1], in[0], Product::kDenseSparseT, op::kLinear, in[2])};
}

// linear_relu(x, weight[, bias]) with a BSR or n:m weight: the bias and the
// relu in the kernel's write-out, so the forward pass of an MLP layer is one
// kernel (the frontend asks for this kernel when it exists; otherwise it
// computes relu(linear(...)), which is also what the other routes do).
std::vector<Tensor> linear_relu_dense_sparse(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 2 || in.size() == 3, "linear_relu: expected 2 or 3 inputs (input, weight[, bias]), got ",
                in.size());
  check_cuda_operand_pair({in[0], in[1]}, op::kLinearRelu);
  const Tensor bias = in.size() == 3 ? in[2] : Tensor();
  return {spmm(in[1], in[0], Product::kDenseSparseT, op::kLinearRelu, bias, /*relu=*/true)};
}

// linear_add(x, weight, bias, r) with a BSR weight: r + linear(x, weight,
// bias) from the product's write-out where its kernel adds r (the wgmma
// kernels of 32x32, 64x64 and 128x128 blocks: bsr_matmul_add); an undefined output
// where none does or the route is pinned apart (route_choices.h), which linear_add_fused passes on (its caller adds r
// itself, or leaves the add to a later pass).
std::vector<Tensor> linear_add_dense_bsr(const std::vector<Tensor>& in, const Attrs&) {
  COPPICE_CHECK(in.size() == 4, "linear_add: expected 4 inputs (input, weight, bias or none, residual), got ",
                in.size());
  check_cuda_operand_pair({in[0], in[1]}, op::kLinearAdd);
  const SpmmProblem p{in[1], in[0], Product::kDenseSparseT, op::kLinearAdd, in[2]};
  if (route_pin("residual_add") == "apart" || !bsr_kernel_is<BsrKernel::kMmaSync>(p)) return {Tensor()};
  return {bsr_matmul_add(in[1], /*transpose_s=*/true, in[0], /*sparse_left=*/false, p.op, in[2], in[3])};
}

// Whether p's n:m weight, not a 2:4 one that sparse tensor cores take, is
// multiplied dense (decompressed, then cuBLAS) under a tanh gelu: then the
// dense weight goes to the dense gelu kernels, whose cuBLASLt epilogue applies
// the tanh gelu (tensor/cuda/linear_lt.cc), instead of a product and a pass.
// (The erf form keeps the product and the pass: cuBLASLt has no erf gelu, and
// its bits stay the composite's.)
bool nm_dense_tanh(const SpmmProblem& p, GeluForm form) {
  return form == GeluForm::kTanh && p.s.layout() == Layout::kNm && multiplies_densely(p.s);
}

// linear_gelu(x, weight[, bias]) with a BSR or n:m weight: {gelu(z), z},
// z = linear(x, weight, bias) (gelu_tanh(z) with the attribute "tanh"), from
// one kernel whose write-out stores both where the product runs on the BSR
// mma.sync kernels (bsr_products.h); a 2:4 weight: that kernel on sparse
// tensor cores (nm_products.h) or the dense op on the decompressed weight,
// whichever measured faster (nm24_gelu_takes_sparse); another n:m weight
// multiplied dense, tanh form: the dense kernel on the decompressed weight;
// otherwise the planner's product, then the gelu.
std::vector<Tensor> linear_gelu_dense_sparse(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 2 || in.size() == 3, "linear_gelu: expected 2 or 3 inputs (input, weight[, bias]), got ",
                in.size());
  check_cuda_operand_pair({in[0], in[1]}, op::kLinearGelu);
  const GeluForm form = gelu_form(attrs);
  const Tensor bias = in.size() == 3 ? in[2] : Tensor();
  const SpmmProblem p{in[1], in[0], Product::kDenseSparseT, op::kLinearGelu, bias};
  if (bsr_kernel_is<BsrKernel::kMmaSync>(p)) {
    auto [y, z] = bsr_mma_matmul_gelu(in[1], /*transpose_s=*/true, in[0], /*sparse_left=*/false, p.op, bias, form);
    return {y, z};
  }
  if (nm24_applies(p)) {
    auto sparse = [&] { return nm24_linear_gelu(nm24_kernel(in[1], false), in[0], in[1], bias, form); };
    auto dense = [&] { return linear_gelu(in[0], nm_dense(in[1]), bias, form); };
    const bool on_sparse = nm24_gelu_takes_sparse(
        p, form, {{"sparse", [&] { return sparse().first; }}, {"dense", [&] { return dense().first; }}});
    auto [y, z] = on_sparse ? sparse() : dense();
    return {y, z};
  }
  if (nm_dense_tanh(p, form)) {
    auto [y, z] = linear_gelu(in[0], nm_dense(in[1]), bias, form);
    return {y, z};
  }
  Tensor z = spmm(in[1], in[0], Product::kDenseSparseT, p.op, bias);
  return {gelu_of_form(z, form), z};
}

// matmul_gelu_backward(g, weight, z) with a BSR or n:m weight:
// gelu_backward(g @ weight, z) (gelu_tanh_backward with the attribute
// "tanh"), the gelu's gradient applied in the product's write-out on the BSR
// mma.sync kernels; a 2:4 weight: the same on sparse tensor cores or the dense
// op on the decompressed weight, whichever measured faster
// (nm24_gelu_takes_sparse); another n:m weight multiplied dense, tanh form:
// the dense kernel on the decompressed weight; otherwise the planner's
// product, then the gradient's pass.
std::vector<Tensor> matmul_gelu_backward_dense_sparse(const std::vector<Tensor>& in, const Attrs& attrs) {
  COPPICE_CHECK(in.size() == 3, "matmul_gelu_backward: expected 3 inputs (grad, weight, z), got ", in.size());
  check_cuda_operand_pair({in[0], in[1]}, op::kMatmulGeluBackward);
  const GeluForm form = gelu_form(attrs);
  const Tensor no_bias;
  const SpmmProblem p{in[1], in[0], Product::kDenseSparse, op::kMatmulGeluBackward, no_bias};
  if (bsr_kernel_is<BsrKernel::kMmaSync>(p)) {
    return {bsr_mma_matmul_gelu_grad(in[1], /*transpose_s=*/false, in[0], /*sparse_left=*/false, p.op, in[2], form)};
  }
  if (nm24_applies(p)) {
    auto sparse = [&] { return nm24_matmul_gelu_grad(nm24_kernel(in[1], true), in[0], in[1], in[2], form); };
    auto dense = [&] { return matmul_gelu_backward(in[0], nm_dense(in[1]), in[2], form); };
    return {nm24_gelu_takes_sparse(p, form, {{"sparse", sparse}, {"dense", dense}}) ? sparse() : dense()};
  }
  if (nm_dense_tanh(p, form)) return {matmul_gelu_backward(in[0], nm_dense(in[1]), in[2], form)};
  const Tensor gz = spmm(in[1], in[0], Product::kDenseSparse, p.op);
  return {gelu_backward_of_form(gz, in[2], form)};
}

const bool kRegistered = [] {
  Dispatcher& d = Dispatcher::instance();
  for (const std::string& f : builtin_sparse_format_names()) {
    d.register_kernel(op::kMatmul, DeviceType::kCuda, {f, "dense"}, matmul_sparse_dense);
    d.register_kernel(op::kLinear, DeviceType::kCuda, {f, "dense"}, linear_sparse_dense);
    d.register_kernel(op::kMatmul, DeviceType::kCuda, {"dense", f}, matmul_dense_sparse);
    d.register_kernel(op::kLinear, DeviceType::kCuda, {"dense", f}, linear_dense_sparse);
  }
  for (const char* f : {"bsr", "nm"}) {
    d.register_kernel(op::kLinear, DeviceType::kCuda, {"dense", f, "dense"}, linear_dense_sparse_bias);
    d.register_kernel(op::kLinearRelu, DeviceType::kCuda, {"dense", f, "dense"}, linear_relu_dense_sparse);
    d.register_kernel(op::kLinearRelu, DeviceType::kCuda, {"dense", f}, linear_relu_dense_sparse);
  }
  d.register_kernel(op::kLinearAdd, DeviceType::kCuda, {"dense", "bsr", "dense", "dense"}, linear_add_dense_bsr);
  d.register_kernel(op::kLinearAdd, DeviceType::kCuda, {"dense", "bsr", "none", "dense"}, linear_add_dense_bsr);
  for (const char* f : {"bsr", "nm"}) {
    d.register_kernel(op::kLinearGelu, DeviceType::kCuda, {"dense", f, "dense"}, linear_gelu_dense_sparse);
    d.register_kernel(op::kLinearGelu, DeviceType::kCuda, {"dense", f}, linear_gelu_dense_sparse);
    d.register_kernel(op::kMatmulGeluBackward, DeviceType::kCuda, {"dense", f, "dense"},
                      matmul_gelu_backward_dense_sparse);
  }
  return true;
}();

}  // namespace
}  // namespace coppice::sparse_cuda
