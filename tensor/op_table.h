// The op table: every op the dispatcher knows besides the elementwise ones
// (tensor/unary_ops.h, binary_ops.h), each declared once, in COPPICE_OPS
// below: its name, how many inputs it takes, its attributes and their types,
// which inputs may be sparse, what format its outputs take, the cells it
// promises on every device, and, where it has no dense CPU kernel, why.
//
// What comes from it:
//   op::kMatmul, ...          the names, as constants: registrations and
//                             dispatches spell no op name as a string
//   Dispatcher                refuses a kernel for an undeclared op or for an
//                             input count outside the op's arity (at static
//                             initialization: the program stops, naming the
//                             op), and a dispatch with a wrong input count
//   tests/tensor/op_table_test  every registered cell is of a declared op,
//                             with sparse formats only where the op takes
//                             them; every op has its dense CPU cell or says
//                             why not
//   tests/sparse/product_parity_test  the promised cells it requires
//
// The elementwise ops stay declared in their own tables (their kName is their
// declaration); find_op() answers for them too (op_table.cc). A user's op
// (an extension, a test) is declared at start-up with declare_op, before its
// kernels are registered, as a user's format is with register_format.
//
// Adding an op: its row below (the constant, the name, its description), its
// kernels registered under the constant, its frontend dispatching under it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coppice {

enum class AttrType { kInt, kDouble, kBool, kString, kInts };

// What an op's outputs are, in format terms (sparse/ops.h says more).
enum class OpOutputRule {
  kDense,        // dense tensors (for ops that build a sparse tensor: its parts)
  kPatternOf,    // the first: input `pattern_input`'s format, pattern and pattern version; the rest dense
  kTransposeOf,  // input 0 transposed, in its format (CSR and CSC trade arrays)
  kDenseOrCsr,   // dense; CSR with a fresh pattern for two CSR operands (SpGEMM)
  kInPlace,      // written into its inputs; its outputs, if any, are those inputs
  kElementwise,  // the elementwise tables' rules (tensor/unary_ops.h, binary_ops.h)
};

struct AttrSpec {
  std::string name;
  AttrType type;
};

// One op's declaration. Rows are written as chains of the setters below.
struct OpSpec {
  std::string name;
  int min_inputs = 0;  // undefined inputs count: they dispatch as "none"
  int max_inputs = 0;
  std::vector<AttrSpec> attrs;
  std::string attrs_from;          // where attributes generated elsewhere are declared
  std::vector<int> sparse_inputs;  // the inputs a kernel may take in a sparse format
  OpOutputRule output = OpOutputRule::kDense;
  int pattern_input = -1;  // for kPatternOf
  // Input formats registered on every device; "<fmt>" stands for each of
  // sparse/'s built-in sparse formats (one per signature).
  std::vector<std::vector<std::string>> promised;
  std::string no_dense_cpu;  // why there is no dense CPU cell; empty: there is one

  OpSpec() = default;
  explicit OpSpec(std::string n) : name(std::move(n)) {}
  OpSpec& inputs(int n) { return inputs(n, n); }
  OpSpec& inputs(int lo, int hi) {
    min_inputs = lo;
    max_inputs = hi;
    return *this;
  }
  OpSpec& attr(std::string n, AttrType t) {
    attrs.push_back({std::move(n), t});
    return *this;
  }
  OpSpec& attrs_declared_in(std::string where) {
    attrs_from = std::move(where);
    return *this;
  }
  OpSpec& sparse(std::vector<int> positions) {
    sparse_inputs = std::move(positions);
    return *this;
  }
  OpSpec& outputs(OpOutputRule rule, int input = -1) {
    output = rule;
    pattern_input = input;
    return *this;
  }
  OpSpec& promise(std::vector<std::string> formats) {
    promised.push_back(std::move(formats));
    return *this;
  }
  OpSpec& without_dense_cpu(std::string why) {
    no_dense_cpu = std::move(why);
    return *this;
  }
  bool takes_sparse(int input) const;
  std::string arity() const;  // arity_text(min_inputs, max_inputs)
};

// "1 input", "2 inputs", "2 to 3 inputs": for messages.
std::string arity_text(size_t min_inputs, size_t max_inputs);

// The rows: X(constant, name, setters). The setters run in op_table.cc, in
// namespace op_table_terms (kInt, kDense, ... unqualified).
// clang-format off
#define COPPICE_OPS(X)                                                                                               \
  /* products (tensor/ops_linalg.cc; sparse kernels in sparse/{cpu,cuda}) */                                        \
  X(kGemm, "gemm", .inputs(2, 3).attr("trans_a", kBool).attr("trans_b", kBool))                                     \
  X(kMatmul, "matmul", .inputs(2).sparse({0, 1}).outputs(kDenseOrCsr)                                               \
      .promise({"<fmt>", "dense"}).promise({"dense", "<fmt>"}).promise({"dense", "dense"}).promise({"csr", "csr"}))   \
  X(kLinear, "linear", .inputs(2, 3).sparse({0, 1})                                                                 \
      .promise({"dense", "<fmt>"}).promise({"<fmt>", "dense"}).promise({"dense", "dense"}))                         \
  X(kLinearRelu, "linear_relu", .inputs(2, 3).sparse({1}).without_dense_cpu(kFusedOnly))                            \
  X(kLinearAdd, "linear_add", .inputs(4).sparse({1}).without_dense_cpu(kFusedOrDeclined))                          \
  X(kLinearGelu, "linear_gelu", .inputs(2, 3).attr("tanh", kBool).sparse({1}).without_dense_cpu(kFusedOnly))       \
  X(kMatmulGeluBackward, "matmul_gelu_backward", .inputs(3).attr("tanh", kBool).sparse({1})                         \
      .without_dense_cpu(kFusedOnly))                                                                               \
  X(kSddmm, "sddmm", .inputs(3).sparse({2}).outputs(kPatternOf, 2).promise({"dense", "dense", "<fmt>"})              \
      .without_dense_cpu(kSparsePattern))                                                                           \
  X(kSddmmRowSums, "sddmm_row_sums", .inputs(3).sparse({2}).outputs(kPatternOf, 2).without_dense_cpu(kCudaFused))   \
  X(kLinearGrads, "linear_grads", .inputs(3, 4).attr("bias", kBool).attr("tanh", kBool).sparse({2})                 \
      .outputs(kPatternOf, 2).without_dense_cpu(kFusedOrDeclined))                                                  \
  X(kTranspose, "transpose", .inputs(1).sparse({0}).outputs(kTransposeOf).promise({"<fmt>"}).promise({"dense"}))    \
  /* reductions (tensor/ops_reduce.cc) */                                                                           \
  X(kSum, "sum", .inputs(1).attr("dims", kInts).attr("keepdim", kBool).sparse({0})                                  \
      .promise({"<fmt>"}).promise({"dense"}))                                                                       \
  X(kReduceSum, "reduce_sum", .inputs(1))                                                                           \
  X(kReduceSumCols, "reduce_sum_cols", .inputs(1))                                                                  \
  X(kReduceMax, "reduce_max", .inputs(1))                                                                           \
  X(kReduceMin, "reduce_min", .inputs(1))                                                                           \
  X(kReluBackwardColSums, "relu_backward_col_sums", .inputs(2))                                                     \
  X(kTopk, "topk", .inputs(1).attr("k", kInt).attr("largest", kBool))                                               \
  /* selection, indexing, filling (tensor/ops_elementwise.cc, ops_shape.cc, tensor.cc, factories.cc) */            \
  X(kWhere, "where", .inputs(3))                                                                                    \
  /* "trusted": the index is Coppice's own and in range (index_select_trusted): no range check */                 \
  X(kIndexSelect, "index_select", .inputs(2).attr("dim", kInt).attr("trusted", kBool))                              \
  X(kGather, "gather", .inputs(2).attr("dim", kInt))                                                                \
  X(kScatterAdd, "scatter_add", .inputs(3).attr("dim", kInt).attr("trusted", kBool))                                \
  X(kIndexCopy, "index_copy_", .inputs(3).attr("dim", kInt).outputs(kInPlace))                                        \
  X(kFill, "fill_", .inputs(1).attr("value", kDouble).outputs(kInPlace))                                            \
  X(kCopy, "copy_", .inputs(2).outputs(kInPlace))                                                                   \
  X(kUniform, "uniform_", .inputs(1).attr("seed", kInt).attr("offset", kInt).attr("low", kDouble)                   \
      .attr("high", kDouble).outputs(kInPlace))                                                                     \
  X(kNormal, "normal_", .inputs(1).attr("seed", kInt).attr("offset", kInt).attr("mean", kDouble)                    \
      .attr("std", kDouble).outputs(kInPlace))                                                                      \
  X(kRandint, "randint_", .inputs(1).attr("seed", kInt).attr("offset", kInt).attr("low", kInt)                      \
      .attr("high", kInt).outputs(kInPlace))                                                                        \
  /* nn (tensor/ops_nn.cc; attention: sparse/attention/attention.cc) */                                               \
  X(kSoftmax, "softmax", .inputs(1).attr("dim", kInt).without_dense_cpu(kHook))                                     \
  X(kLogSoftmax, "log_softmax", .inputs(1).attr("dim", kInt).without_dense_cpu(kHook))                              \
  X(kCrossEntropy, "cross_entropy", .inputs(2).attr("label_smoothing", kDouble).attr("ignore_index", kInt)          \
      .attr("reduction", kString).without_dense_cpu(kCudaFused))                                                    \
  X(kCrossEntropyBackward, "cross_entropy_backward", .inputs(3).attr("label_smoothing", kDouble)                    \
      .attr("ignore_index", kInt).attr("reduction", kString).without_dense_cpu(kCudaFused))                         \
  X(kLayerNorm, "layer_norm", .inputs(3).attr("normalized_shape", kInts).attr("eps", kDouble)                       \
      .without_dense_cpu(kCudaFused))                                                                               \
  X(kAddLayerNorm, "add_layer_norm", .inputs(4).attr("normalized_shape", kInts).attr("eps", kDouble)                \
      .without_dense_cpu(kCudaFused))                                                                               \
  X(kLayerNormBackward, "layer_norm_backward", .inputs(3).attr("d", kInt).attr("eps", kDouble)                      \
      .attr("dweight", kBool).attr("dbias", kBool).without_dense_cpu(kCudaFused))                                   \
  X(kAddLayerNormBackward, "add_layer_norm_backward", .inputs(4).attr("d", kInt).attr("eps", kDouble)               \
      .attr("dweight", kBool).attr("dbias", kBool).without_dense_cpu(kCudaFused))                                   \
  X(kEmbeddingBackward, "embedding_backward", .inputs(2).attr("num_embeddings", kInt))                              \
  /* weight, indices i64 [n], offsets i64 [B + 1], per-sample weights [n] or "none" (tensor/ops_embedding_bag.cc) */ \
  X(kEmbeddingBag, "embedding_bag", .inputs(3, 4).attr("mode", kString).attr("padding_idx", kInt))                  \
  X(kIm2col, "im2col", .inputs(1).attr("kernel", kInts).attr("stride", kInts).attr("padding", kInts)                \
      .attr("dilation", kInts))                                                                                     \
  X(kCol2im, "col2im", .inputs(1).attr("kernel", kInts).attr("stride", kInts).attr("padding", kInts)                \
      .attr("dilation", kInts).attr("size", kInts))                                                                 \
  X(kConv2d, "conv2d", .inputs(3).attr("kernel", kInts).attr("stride", kInts).attr("padding", kInts)                \
      .attr("dilation", kInts).without_dense_cpu(kHook))                                                            \
  X(kMaxPool2d, "max_pool2d", .inputs(1).attr("kernel", kInts).attr("stride", kInts).attr("padding", kInts))        \
  /* q, k, v (then out, lse, dout, dq, dk, dv), then the block layout's five walks or five "none" */               \
  X(kAttentionForward, "attention_forward", .inputs(8).attr("scale", kDouble).attr("causal", kBool)                 \
      .attr("block", kInt))                                                                                         \
  X(kAttentionBackward, "attention_backward", .inputs(14).attr("scale", kDouble).attr("causal", kBool)              \
      .attr("block", kInt).outputs(kInPlace))                                                                       \
  /* sparse/'s arrays and device conversions (sparse/ops.h, convert.cc, nm.cc, nm_transposable.cc) */               \
  X(kCsrRowSoftmax, "csr_row_softmax", .inputs(2))                                                                  \
  X(kCsrRowSoftmaxBackward, "csr_row_softmax_backward", .inputs(3))                                                 \
  X(kDenseMaskToCsr, "dense_mask_to_csr", .inputs(2))                                                               \
  X(kNmToDense, "nm_to_dense", .inputs(1).sparse({0}).without_dense_cpu(kDeviceTwin))                               \
  X(kNm24Compress, "nm24_compress", .inputs(1).without_dense_cpu(kDeviceTwin))                                      \
  X(kNm24CompressMasked, "nm24_compress_masked", .inputs(2).without_dense_cpu(kDeviceTwin))                         \
  X(kNm24TransposableMask, "nm24_transposable_mask", .inputs(1).without_dense_cpu(kDeviceTwin))                     \
  /* sparsifiers' kernels (sparsifiers/mask_ops.cc, fused_relu.cc) */                                               \
  X(kReluToCsr, "relu_to_csr", .inputs(1).attr("threshold", kDouble))                                               \
  X(kSparsifyStream, "sparsify_stream", .inputs(1).attr("mode", kString).attr("threshold", kDouble)                 \
      .attr("p", kDouble).attr("seed", kInt).attr("offset", kInt).attr("scale", kDouble).attr("values", kBool))     \
  X(kSparsifyTopkMask, "sparsify_topk_mask", .inputs(1).attr("k", kInt).attr("magnitude", kBool))                   \
  X(kSparsifyBlockScores, "sparsify_block_scores", .inputs(1).attr("block_rows", kInt).attr("block_cols", kInt)     \
      .attr("l1", kBool))                                                                                           \
  X(kSparsifyNmMask, "sparsify_nm_mask", .inputs(1).attr("n", kInt).attr("m", kInt))                                \
  /* optimizers' kernels (optim/finite_check.cc, fused_step.h: the last two inputs are the non-finite flag and */   \
  /* the clip factor, each dense or "none") */                                                                      \
  X(kNonfiniteFlag, "nonfinite_flag", .inputs(2))                                                                   \
  X(kSgdStep, "sgd_step", .inputs(5).attrs_declared_in(kSgdArgs).outputs(kInPlace))                                 \
  X(kSgdStepMixed, "sgd_step_mixed", .inputs(6).attrs_declared_in(kSgdArgs).outputs(kInPlace))                      \
  X(kAdamStep, "adam_step", .inputs(6).attrs_declared_in(kAdamArgs).outputs(kInPlace))
// clang-format on

// The names, as constants (op::kMatmul is "matmul").
namespace op {
#define COPPICE_OP_NAME(constant, name, ...) inline constexpr char constant[] = name;
COPPICE_OPS(COPPICE_OP_NAME)
#undef COPPICE_OP_NAME
}  // namespace op

// The declaration of `name` (this table's, an elementwise table's or a
// user's), or nullptr.
const OpSpec* find_op(std::string_view name);

// Every declared op: this table's rows, then the elementwise tables', then
// the users'.
std::vector<const OpSpec*> declared_ops();

// Declares a user's op (an extension's, a test's); an error when the name is
// taken or the arity is empty. Not thread-safe: declare at start-up, as
// kernels are registered.
void declare_op(OpSpec spec);

}  // namespace coppice
