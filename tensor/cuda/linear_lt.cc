// Dense linear layers through cuBLASLt, with the bias in the GEMM's epilogue:
// "linear" and "linear_relu" with a bias (y = x W^T + b, relu'd or not:
// CUBLASLT_EPILOGUE_BIAS, RELU_BIAS). They save the separate pass that
// add(y, bias) makes over a [tokens, out] matrix.
//
// A transformer MLP's tanh gelu the same way: "linear_gelu" with the
// attribute tanh (GELU_AUX_BIAS, or GELU_AUX without a bias: y = gelu_tanh(z)
// and z, the auxiliary output) and "matmul_gelu_backward" with it (DGELU: the
// gradient at z, reading z as the auxiliary input). That saves the gelu's pass
// each way (two passes over a [tokens, hidden] matrix a layer). cuBLASLt's
// GELU epilogues are the tanh form only, so the erf form (gelu) runs the
// composite here. Their bits are not the composite's: the epilogue applies
// the gelu (or its gradient) to the f32 sum before rounding, where the
// composite rounds the product first, so the two differ by about one 16-bit
// rounding (the CUDA tests bound it).
//
// The bias gradient is not taken from cuBLASLt (CUBLASLT_EPILOGUE_BGRADB on
// the weight-gradient GEMM, which this file ran until 2026-11-28): cuBLASLt
// runs it as a kernel of its own after the GEMM (globalKernelBgradAB_v2,
// 1.03 ms of the GPT step's kernels on an H200, against 0.77 ms for the same
// sums by the column sums of reduce.cu), so linear_weight_grad is a plain
// GEMM and sum(g, {0}) (tensor/ops_linalg.cc); the dense GPT step went from
// 25.02 to 24.78 ms (means of six alternating runs each).
//
// Row-major to cuBLASLt's column-major (a row-major [r, c] matrix is a
// column-major [c, r] one, with ld = c; gemm.cc does the same): y [N, out] =
// x [N, in] W^T: column-major y is D [out x N] (ld out) = op(A) op(B) with A
// = W read as [in x out] (ld in), op T, and B = x read as [in x N] (ld in),
// op N: m = out, n = N, k = in. EPILOGUE_BIAS adds a vector of length m (D's
// rows) to every column: b [out] to every row of y.
//
// Types: bf16 and f16 in and out with f32 compute; f32 in plain f32 unless
// allow_tf32() (tensor/precision.h), as gemm.cc; the bias has the output's
// type. f64, and anything cuBLASLt has no algorithm for (a dtype, a shape,
// an alignment), runs the composite instead: matmul, then add (and relu);
// that composite is the CPU twin.
//
// Same bits every run: the algorithm is chosen once per (device, epilogue,
// m, n, k, dtype, TF32) by cublasLtMatmulAlgoGetHeuristic and cached, and
// the choice does not depend on where the operands happen to lie: the
// heuristic is told every pointer is only 16-byte aligned (the preferences
// for A, B, C and D; for the bias vector, whose alignment cuBLASLt reads off
// the pointer itself, a stand-in address 16 bytes off a 32-byte boundary),
// and operands that are not 16-byte aligned, or whose rows are not a
// multiple of 16 bytes, take the composite. Split-K
// reductions are limited to ones in f32 (like gemm.cc's
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION). The workspace is
// the caching allocator's, per call, so a graph capture records it from its
// pool. One cuBLASLt handle per device, created on first use.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "tensor/cuda/lazy/library.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/op_profile.h"
#include "tensor/ops.h"
#include "tensor/precision.h"

namespace coppice::cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr uint64_t kMaxWorkspaceBytes = uint64_t{32} << 20;
constexpr uintptr_t kAlignment = 16;  // what every operand must have, and all the heuristic assumes

void check_lt(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  // libcublasLt.so.13 is found at run time (lazy/library.h): missing, it says so.
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) {
    const std::string missing = cuda_library_load_error(CudaLibrary::kCublasLt);
    if (!missing.empty()) fail("linear_lt: ", missing, " (in ", what, ")");
  }
  fail("linear_lt: cuBLASLt error ", cublasLtGetStatusName(status), ": ", cublasLtGetStatusString(status), " (in ",
       what, ")");
}

struct LtHandle {
  std::mutex mu;  // one call at a time per handle, as gemm.cc does with cuBLAS's
  cublasLtHandle_t handle = nullptr;
};

// The caller has made `device` current.
LtHandle& lt_handle_for(int device) {
  COPPICE_CHECK(device >= 0 && device < kMaxDevices, "linear_lt: device index ", device, " out of range");
  static std::array<LtHandle, kMaxDevices>* handles = new std::array<LtHandle, kMaxDevices>();  // never destroyed
  static std::mutex create_mu;
  LtHandle& h = (*handles)[device];
  std::lock_guard<std::mutex> lock(create_mu);
  if (h.handle == nullptr) check_lt(cublasLtCreate(&h.handle), "cublasLtCreate");
  return h;
}

// Owners of cuBLASLt's descriptors (host objects, made per call: the bias
// pointer is part of the matmul descriptor).
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

Layout make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  return Layout(l);
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  check_lt(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value,
              const char* what) {
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)), what);
}

enum class Epilogue { kBias, kReluBias, kGeluAux, kGeluAuxBias, kDGelu };

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool reads_bias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kReluBias || e == Epilogue::kGeluAuxBias; }
bool has_aux(Epilogue e) { return e == Epilogue::kGeluAux || e == Epilogue::kGeluAuxBias || e == Epilogue::kDGelu; }

// The op profiler's name for a fused call (tests count them: op_profile_calls("linear_lt"), and
// op_profile_calls("linear_lt_gelu") for the gelu forms).
const char* profile_key(Epilogue e) {
  switch (e) {
    case Epilogue::kBias: return "linear_lt(bias)";
    case Epilogue::kReluBias: return "linear_lt(relu_bias)";
    case Epilogue::kGeluAux: return "linear_lt_gelu(forward)";
    case Epilogue::kGeluAuxBias: return "linear_lt_gelu(forward_bias)";
    case Epilogue::kDGelu: return "linear_lt_gelu(gradient)";
  }
  return "linear_lt(?)";
}

// D [m x n] = op(A) op(B), column-major, every matrix packed (ld = its rows
// as stored); the epilogue reads `bias` (when reads_bias) and writes or reads
// `aux` (when has_aux), an [m x n] matrix packed like D.
struct LtProduct {
  Epilogue epilogue;
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  const void* a;
  const void* b;
  void* d;
  const void* bias = nullptr;
  void* aux = nullptr;
};

// What the heuristic is told of a vector's or matrix's address: `p` itself
// when it is 32-byte aligned, else one 16 bytes off. cuBLASLt reads the bias
// and auxiliary alignments off their pointers (it never dereferences them),
// so a stand-in 16 bytes off a 32-byte boundary makes it pick an algorithm
// that every 16-byte-aligned operand can use.
const void* alignment_stand_in(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  return static_cast<const char*>(p) + (address % (2 * kAlignment) == 0 ? kAlignment : 0);
}

struct AlgoKey {
  int device;
  Epilogue epilogue;  // with it the transposes, which each epilogue fixes
  DType dtype;
  bool tf32;
  int64_t m, n, k;
  bool operator<(const AlgoKey& o) const {
    return std::tie(device, epilogue, dtype, tf32, m, n, k) <
           std::tie(o.device, o.epilogue, o.dtype, o.tf32, o.m, o.n, o.k);
  }
};

struct AlgoChoice {
  bool found = false;  // false: cuBLASLt has none, and the composite runs every time
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

// The dtypes tried on cuBLASLt; f64 always takes the composite.
bool lt_dtype(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// Runs p through cuBLASLt on `device` (current), on its stream; false, having
// queued nothing, where cuBLASLt has no algorithm for it.
bool lt_matmul(int device, DType dtype, const LtProduct& p) {
  if (!lt_dtype(dtype)) return false;
  const bool f32 = dtype == DType::kF32;
  // cuBLAS's 32-bit sizes (gemm.cc's limits; the composite reports them), and
  // degenerate products, which the composite does as well: cuBLASLt's bias
  // epilogue has had bugs with dimensions of 1 (PyTorch keeps them off it).
  for (int64_t v : {p.m, p.n, p.k}) {
    if (v <= 1 || v > INT_MAX) return false;
  }
  // Rows of a multiple of 16 bytes (every leading dimension is one of m, n
  // and k): otherwise cuBLASLt's heuristic picks CUDA-core kernels for the
  // epilogues (the MLP's 10-wide output layer: a 0.3 ms magma_sgemmEx for
  // its weight gradient on an H200, against 0.03 ms for the composite's GEMM).
  for (int64_t v : {p.m, p.n, p.k}) {
    if (v * static_cast<int64_t>(dtype_size(dtype)) % static_cast<int64_t>(kAlignment) != 0) return false;
  }
  // The auxiliary matrix's leading dimension (m) must be a multiple of 8.
  if (has_aux(p.epilogue) && p.m % 8 != 0) return false;
  for (const void* ptr : {p.a, p.b, static_cast<const void*>(p.d), p.bias, static_cast<const void*>(p.aux)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % kAlignment != 0) return false;
  }
  const cudaDataType_t type = f32 ? CUDA_R_32F : dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const bool tf32 = f32 && allow_tf32();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  cublasLtMatmulDesc_t raw_desc = nullptr;
  check_lt(cublasLtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  MatmulDesc desc(raw_desc);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.op_a), "TRANSA");
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.op_b), "TRANSB");
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(lt_epilogue(p.epilogue)), "EPILOGUE");
  if (has_aux(p.epilogue)) set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.m, "EPILOGUE_AUX_LD");
  const bool a_n = p.op_a == CUBLAS_OP_N, b_n = p.op_b == CUBLAS_OP_N;
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  Layout a = make_layout(type, a_n ? m : k, a_n ? k : m, a_n ? p.m : p.k);
  Layout b = make_layout(type, b_n ? k : n, b_n ? n : k, b_n ? p.k : p.n);
  Layout d = make_layout(type, m, n, p.m);  // C as well (beta = 0)

  const AlgoKey key{device, p.epilogue, dtype, tf32, p.m, p.n, p.k};
  static std::mutex cache_mu;
  static std::map<AlgoKey, AlgoChoice>* cache = new std::map<AlgoKey, AlgoChoice>();  // never destroyed
  LtHandle& h = lt_handle_for(device);
  AlgoChoice choice;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache->find(key);
    if (it == cache->end()) {
      cublasLtMatmulPreference_t raw_pref = nullptr;
      check_lt(cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
      Preference pref(raw_pref);
      set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes, "MAX_WORKSPACE_BYTES");
      set_pref(raw_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
               "REDUCTION_SCHEME_MASK");
      for (cublasLtMatmulPreferenceAttributes_t attr :
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        set_pref(raw_pref, attr, static_cast<uint32_t>(kAlignment), "MIN_ALIGNMENT");
      }
      if (reads_bias(p.epilogue)) {
        set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, alignment_stand_in(p.bias), "BIAS_POINTER");
      }
      if (has_aux(p.epilogue)) {
        set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, alignment_stand_in(p.aux), "AUX_POINTER");
      }
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      cublasStatus_t status;
      {
        std::lock_guard<std::mutex> handle_lock(h.mu);
        status = cublasLtMatmulAlgoGetHeuristic(h.handle, raw_desc, a.get(), b.get(), d.get(), d.get(), raw_pref, 1,
                                                &result, &returned);
      }
      // NOT_SUPPORTED or INVALID_VALUE (a combination of types, epilogue and
      // layouts this version does not take), or no result: the composite
      // runs. The CUDA tests check that bf16 and f16 do take this path.
      if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE) {
        check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
      }
      AlgoChoice c;
      if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        c.found = true;
        c.algo = result.algo;
        c.workspace_bytes = result.workspaceSize;
      }
      it = cache->emplace(key, c).first;
    }
    choice = it->second;
  }
  if (!choice.found) return false;

  if (reads_bias(p.epilogue)) set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, "BIAS_POINTER");
  if (has_aux(p.epilogue)) set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux, "AUX_POINTER");
  std::optional<ProfileScope> profile;
  if (op_profile_enabled()) profile.emplace(profile_key(p.epilogue), Device::cuda(device));
  Tensor workspace;  // freed after the call is queued: one stream, so the block is reused only after it ran
  if (choice.workspace_bytes > 0) {
    workspace =
        Tensor::empty({static_cast<int64_t>(choice.workspace_bytes)}, TensorOptions(DType::kU8, Device::cuda(device)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  std::lock_guard<std::mutex> lock(h.mu);
  // The stream is the graph-capture stream while capturing (stream.h).
  const cublasStatus_t status = cublasLtMatmul(
      h.handle, raw_desc, &alpha, p.a, a.get(), p.b, b.get(), &beta, p.d, d.get(), p.d, d.get(), &choice.algo,
      workspace.defined() ? workspace.data_ptr() : nullptr, choice.workspace_bytes, current_stream(device));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;  // refused before queuing anything
  check_lt(status, "cublasLtMatmul");
  return true;
}

void check_cuda_matrix(const Tensor& t, std::string_view op, const char* what, int64_t dim) {
  COPPICE_CHECK(t.defined(), op, ": ", what, " is missing");
  check_dense(t, op, what);
  COPPICE_CHECK(t.device().is_cuda(), op, ": ", what, " must be on a CUDA device, got ", t.device().to_string());
  COPPICE_CHECK(t.dim() == dim, op, ": ", what, " must be ", dim, "-D, got ", shape_to_string(t.shape()));
  COPPICE_CHECK(is_floating(t.dtype()), op, ": expected floating-point operands, got ", dtype_name(t.dtype()));
}

// A linear's operands x [N, in], weight [out, in] and bias [out] (optional:
// `in` has 2 or 3 tensors), checked and made contiguous, with their sizes.
struct LinearOperands {
  Tensor x, w, bias;  // bias undefined when none was given
  int64_t rows, k, out;
  DType dtype;
};

LinearOperands linear_operands(const std::vector<Tensor>& in, std::string_view op, bool bias_required) {
  const size_t lo = bias_required ? 3 : 2;
  COPPICE_CHECK(in.size() >= lo && in.size() <= 3, op, ": expected input, weight and ",
                bias_required ? "bias" : "an optional bias", ", got ", in.size(), " inputs");
  const bool has_bias = in.size() == 3;
  check_cuda_matrix(in[0], op, "input", 2);
  check_cuda_matrix(in[1], op, "weight", 2);
  if (has_bias) check_cuda_matrix(in[2], op, "bias", 1);
  check_same_device(in, op);
  const int64_t rows = in[0].size(0), k = in[0].size(1), out = in[1].size(0);
  COPPICE_CHECK(in[1].size(1) == k && (!has_bias || in[2].size(0) == out), op,
                ": expected input [N, in], weight [out, in] and bias [out], got ", shape_to_string(in[0].shape()), ", ",
                shape_to_string(in[1].shape()), has_bias ? " and " + shape_to_string(in[2].shape()) : "");
  const DType dtype = in[0].dtype();
  COPPICE_CHECK(in[1].dtype() == dtype && (!has_bias || in[2].dtype() == dtype), op,
                ": input, weight and bias must have one dtype");
  return {in[0].contiguous(), in[1].contiguous(), has_bias ? in[2].contiguous() : Tensor(), rows, k, out, dtype};
}

// y = x W^T (+ bias) as cuBLASLt's product: m = out, n = N, k = in, A = W
// (op T), B = x (the mapping at the top); an auxiliary matrix has y's shape.
LtProduct linear_product(Epilogue e, const LinearOperands& o, const Tensor& y, const Tensor& aux = Tensor()) {
  LtProduct p{e, CUBLAS_OP_T, CUBLAS_OP_N, o.out, o.rows, o.k, o.w.data_ptr(), o.x.data_ptr(), y.data_ptr()};
  p.bias = o.bias.defined() ? o.bias.data_ptr() : nullptr;
  p.aux = aux.defined() ? aux.data_ptr() : nullptr;
  return p;
}

// "linear" / "linear_relu" (x [N, in], weight [out, in], bias [out]) -> y [N, out].
std::vector<Tensor> linear_bias(const std::vector<Tensor>& in, bool relu) {
  const LinearOperands o = linear_operands(in, relu ? op::kLinearRelu : op::kLinear, /*bias_required=*/true);
  const int device = o.x.device().index;
  DeviceGuard guard(device);
  if (lt_dtype(o.dtype)) {
    Tensor y = Tensor::empty({o.rows, o.out}, o.x.options());
    if (lt_matmul(device, o.dtype, linear_product(relu ? Epilogue::kReluBias : Epilogue::kBias, o, y))) return {y};
  }
  // The composite (the CPU twin): what cuBLASLt declines, and f64.
  Tensor z = add(matmul(o.x, o.w.t()), o.bias);
  return {relu ? coppice::relu(z) : z};
}

// "linear_gelu" (x [N, in], weight [out, in], bias [out] or none) -> {y =
// gelu(z), z} [N, out], the gelu's form from the attribute tanh.
std::vector<Tensor> linear_gelu_dense(const std::vector<Tensor>& in, const Attrs& attrs) {
  const LinearOperands o = linear_operands(in, op::kLinearGelu, /*bias_required=*/false);
  const GeluForm form = gelu_form(attrs);
  const int device = o.x.device().index;
  DeviceGuard guard(device);
  if (form == GeluForm::kTanh && lt_dtype(o.dtype)) {
    Tensor y = Tensor::empty({o.rows, o.out}, o.x.options()), z = Tensor::empty({o.rows, o.out}, o.x.options());
    const Epilogue e = o.bias.defined() ? Epilogue::kGeluAuxBias : Epilogue::kGeluAux;
    if (lt_matmul(device, o.dtype, linear_product(e, o, y, z))) return {y, z};
  }
  // The composite (the CPU twin): the erf form, what cuBLASLt declines, f64.
  Tensor z = linear(o.x, o.w, o.bias);
  return {gelu_of_form(z, form), z};
}

// "matmul_gelu_backward" (g [N, out], weight [out, in], z [N, in]) -> the
// gradient at z [N, in], the gelu's form from the attribute tanh.
std::vector<Tensor> matmul_gelu_backward_dense(const std::vector<Tensor>& in, const Attrs& attrs) {
  constexpr std::string_view op = op::kMatmulGeluBackward;
  COPPICE_CHECK(in.size() == 3, op, ": expected grad, weight and z, got ", in.size(), " inputs");
  check_cuda_matrix(in[0], op, "grad", 2);
  check_cuda_matrix(in[1], op, "weight", 2);
  check_cuda_matrix(in[2], op, "z", 2);
  check_same_device(in, op);
  const int64_t rows = in[0].size(0), k = in[0].size(1), width = in[1].size(1);
  COPPICE_CHECK(in[1].size(0) == k && in[2].size(0) == rows && in[2].size(1) == width, op,
                ": expected grad [N, out], weight [out, in] and z [N, in], got ", shape_to_string(in[0].shape()), ", ",
                shape_to_string(in[1].shape()), " and ", shape_to_string(in[2].shape()));
  const DType dtype = in[0].dtype();
  COPPICE_CHECK(in[1].dtype() == dtype && in[2].dtype() == dtype, op, ": grad, weight and z must have one dtype");
  const GeluForm form = gelu_form(attrs);
  const Tensor g = in[0].contiguous(), w = in[1].contiguous(), z = in[2].contiguous();
  const int device = g.device().index;
  DeviceGuard guard(device);
  if (form == GeluForm::kTanh && lt_dtype(dtype)) {
    Tensor dz = Tensor::empty({rows, width}, g.options());
    // Column-major dz^T [in x N] = W^T g^T: A = W read as [in x out] (ld in),
    // op N; B = g read as [out x N] (ld out), op N: m = in, n = N, k = out;
    // z^T is D's shape.
    LtProduct p{Epilogue::kDGelu, CUBLAS_OP_N, CUBLAS_OP_N, width, rows, k, w.data_ptr(), g.data_ptr(), dz.data_ptr()};
    p.aux = z.data_ptr();  // read, not written, under DGELU
    if (lt_matmul(device, dtype, p)) return {dz};
  }
  return {gelu_backward_of_form(matmul(g, w), z, form)};
}

const KernelRegistrar kLinear(op::kLinear, DeviceType::kCuda, {"dense", "dense", "dense"},
                              [](const std::vector<Tensor>& in, const Attrs&) { return linear_bias(in, false); });
const KernelRegistrar kLinearRelu(op::kLinearRelu, DeviceType::kCuda, {"dense", "dense", "dense"},
                                  [](const std::vector<Tensor>& in, const Attrs&) { return linear_bias(in, true); });
const KernelRegistrar kLinearGeluBias(op::kLinearGelu, DeviceType::kCuda, {"dense", "dense", "dense"},
                                      linear_gelu_dense);
const KernelRegistrar kLinearGelu(op::kLinearGelu, DeviceType::kCuda, {"dense", "dense"}, linear_gelu_dense);
const KernelRegistrar kMatmulGeluBackward(op::kMatmulGeluBackward, DeviceType::kCuda, {"dense", "dense", "dense"},
                                          matmul_gelu_backward_dense);

}  // namespace
}  // namespace coppice::cuda
