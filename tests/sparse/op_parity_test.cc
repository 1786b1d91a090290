// The parity harness of the ops of tensor/op_table.h whose cells take dense
// operands only (the third beside elementwise_parity_test and
// product_parity_test), in the manner of ggml's test-backend-ops: every
// (op, input formats, device) cell the dispatcher has registered for an op of
// the table (op_rows_tensor.h, op_rows_layers.h) runs, on every dtype its row
// says the op takes, on the row's cases, against the row's reference (the CPU
// dense cell in f64 on the same rounded values, the CPU cell in the run's
// dtype bit for bit where the op is documented to agree so, or the CPU
// composite of a CUDA-only fused op), within parity_util.h's per-dtype
// tolerances. The cells are read from the dispatcher (Dispatcher::cells), so
// a cell added later runs; the count is printed and checked.
//
// The second test holds every declared op and every registered cell to an op
// that one of the three harnesses runs, so a new op without a parity row fails.
//
// Built twice: //tests/sparse:op_parity_test (the CPU cells of every layer)
// and //tests/sparse/cuda:op_parity_test (the CUDA cells too, on a GPU;
// COPPICE_PARITY_CUDA_CELLS says that every CPU cell of a row's op must then
// have its CUDA twin).
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "sparsifiers/fused_relu.h"
#include "tensor/binary_ops.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/unary_ops.h"
#include "tests/sparse/op_problems.h"
#include "tests/sparse/op_rows_layers.h"
#include "tests/sparse/op_rows_tensor.h"
#include "tests/sparse/parity_util.h"
#include "tests/sparse/product_problems.h"

namespace coppice::parity {
namespace {

// One row per op; the dtypes are those the op's documentation promises
// (kernels.h, mask_ops.h, fused_relu.h, optim/*_step.h, nm.cc): floating for
// most; f32/f64 where the frontend widens 16-bit values first (the
// sparsifiers' ranking kernels) or the step is f32/f64 only; nm24_compress
// f32 and the 16-bit types (f64 ranks on the host); randint_ integers;
// sgd_step_mixed's 16-bit parameter types.
const std::vector<OpParityRow>& op_rows() {
  static const auto* rows = new std::vector<OpParityRow>{
      {op::kGemm, kFloating, gemm_cases},
      {op::kReduceSum, kFloating, reduce_sum_cases},
      {op::kReduceSumCols, kFloating, reduce_sum_cols_cases},
      {op::kReduceMax, kFloating, reduce_max_cases},
      {op::kReduceMin, kFloating, reduce_min_cases},
      {op::kReluBackwardColSums, kFloating, relu_backward_col_sums_cases},
      {op::kTopk, kFloating, topk_cases},
      {op::kWhere, kFloating, where_cases},
      {op::kIndexSelect, kFloating, index_select_cases},
      {op::kGather, kFloating, gather_cases},
      {op::kScatterAdd, kFloating, scatter_add_cases},
      {op::kIndexCopy, kFloating, index_copy_cases},
      {op::kFill, kFloating, fill_cases},
      {op::kCopy, kFloating, copy_cases},
      {op::kUniform, kFloating, uniform_cases},
      {op::kNormal, kFloating, normal_cases},
      {op::kRandint, {DType::kI32, DType::kI64, DType::kU8}, randint_cases},
      {op::kSoftmax, kFloating, softmax_cases},
      {op::kLogSoftmax, kFloating, log_softmax_cases},
      {op::kCrossEntropy, kFloating, cross_entropy_cases},
      {op::kCrossEntropyBackward, kFloating, cross_entropy_backward_cases},
      {op::kLayerNorm, kFloating, layer_norm_cases},
      {op::kAddLayerNorm, kFloating, add_layer_norm_cases},
      {op::kLayerNormBackward, kFloating, layer_norm_backward_cases},
      {op::kAddLayerNormBackward, kFloating, add_layer_norm_backward_cases},
      {op::kEmbeddingBackward, kFloating, embedding_backward_cases},
      {op::kEmbeddingBag, kFloating, embedding_bag_cases},
      {op::kIm2col, kFloating, im2col_cases},
      {op::kCol2im, kFloating, col2im_cases},
      {op::kConv2d, kFloating, conv2d_cases},
      {op::kMaxPool2d, kFloating, max_pool2d_cases},
      {op::kAttentionForward, kFloating, attention_forward_cases},
      {op::kAttentionBackward, kFloating, attention_backward_cases},
      {op::kCsrRowSoftmax, kFloating, csr_row_softmax_cases},
      {op::kCsrRowSoftmaxBackward, kFloating, csr_row_softmax_backward_cases},
      {op::kDenseMaskToCsr, kFloating, dense_mask_to_csr_cases},
      {op::kNm24Compress, {DType::kF32, DType::kBF16, DType::kF16}, nm24_compress_cases},
      {op::kNm24CompressMasked, kFloating, nm24_compress_masked_cases},
      {op::kNm24TransposableMask, kFloating, nm24_transposable_mask_cases},
      {op::kReluToCsr, kFloating, relu_to_csr_cases},
      {op::kSparsifyStream, kFloating, sparsify_stream_cases},
      {op::kSparsifyTopkMask, kWide, sparsify_topk_mask_cases},
      {op::kSparsifyBlockScores, kWide, sparsify_block_scores_cases},
      {op::kSparsifyNmMask, kWide, sparsify_nm_mask_cases},
      {op::kNonfiniteFlag, kFloating, nonfinite_flag_cases},
      {op::kSgdStep, kWide, sgd_step_cases},
      {op::kSgdStepMixed, {DType::kBF16, DType::kF16}, sgd_step_mixed_cases},
      {op::kAdamStep, kWide, adam_step_cases},
  };
  return *rows;
}

const OpParityRow* op_row_of(std::string_view op) {
  for (const OpParityRow& r : op_rows()) {
    if (r.op == op) return &r;
  }
  return nullptr;
}

// relu_to_csr's CPU kernel sits beside its caller (sparsifiers/fused_relu.cc,
// not an alwayslink library): a reference to it links the registration in.
void link_relu_to_csr() {
  static auto* volatile linked = &fused_relu;
  ASSERT_NE(linked, nullptr);
}

// Runs one registered cell on every dtype and case of its row; returns the runs made.
int run_cell(const OpParityRow& row, const Dispatcher::Cell& cell) {
  const Device device = cell.device == DeviceType::kCpu ? Device::cpu() : Device::cuda(0);
  const std::vector<std::string_view> formats(cell.formats.begin(), cell.formats.end());
  const Kernel* kernel = Dispatcher::instance().find(cell.op, cell.device, formats);
  int runs = 0;
  for (DType dtype : row.dtypes) {
    SCOPED_TRACE(cell_name(cell.op, cell.formats, cell.device) + ", " + std::string(dtype_name(dtype)));
    std::vector<OpCase> cases;
    try {
      cases = row.build(cell.formats, dtype, device);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "building the cases or their reference threw: " << e.what();
      continue;
    }
    for (OpCase& c : cases) {
      SCOPED_TRACE(c.name);
      // A cell that refuses a dtype its row says it takes is a failure,
      // reported with the others rather than ending the sweep.
      std::vector<Tensor> out;
      try {
        out = (*kernel)(c.inputs, c.attrs);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
        continue;
      }
      ++runs;
      EXPECT_TRUE(follows_output_rule(cell.op, c.inputs, out));
      if (!c.written.empty()) {
        out.clear();
        for (int i : c.written) out.push_back(c.inputs[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(out.size(), c.outputs.size());
      for (size_t i = 0; i < out.size() && i < c.outputs.size(); ++i) {
        const Expected& e = c.outputs[i];
        if (!e.want.defined()) {
          EXPECT_FALSE(out[i].defined()) << "output " << i << " was not asked for";
          continue;
        }
        if (!out[i].defined()) {
          ADD_FAILURE() << "output " << i << " is undefined";
          continue;
        }
        EXPECT_EQ(out[i].device(), device) << "output " << i;
        EXPECT_EQ(out[i].dtype(), e.dtype.value_or(dtype)) << "output " << i;
        EXPECT_TRUE(matches(out[i], e, dtype)) << "output " << i;
      }
    }
  }
  return runs;
}

TEST(OpParityTest, EveryRegisteredCellAgainstItsReference) {
  link_relu_to_csr();
  const std::vector<Dispatcher::Cell> cells = Dispatcher::instance().cells();
  const CellSweep s = sweep_cells(cells, op_row_of, run_cell);
  std::printf(
      "op parity: %d cells run over %zu device(s) (%d runs); %d registered for the %zu ops of the table, %d of "
      "them on a device this machine lacks\n",
      s.run, devices().size(), s.runs, s.registered, op_rows().size(), s.no_device);
  EXPECT_EQ(s.run + s.no_device, s.registered);
#ifdef COPPICE_PARITY_CUDA_CELLS
  // This build links every layer's CUDA kernels: each CPU cell of a row's op
  // has its CUDA twin (kernels.h: "The CPU kernel of each primitive is the
  // CUDA kernel's twin").
  std::set<std::string> present;
  for (const Dispatcher::Cell& c : cells) present.insert(cell_name(c.op, c.formats, c.device));
  for (const Dispatcher::Cell& c : cells) {
    if (c.device != DeviceType::kCpu || op_row_of(c.op) == nullptr) continue;
    EXPECT_EQ(present.count(cell_name(c.op, c.formats, DeviceType::kCuda)), 1u)
        << cell_name(c.op, c.formats, DeviceType::kCpu) << " has no CUDA twin";
  }
#endif
}

// Every declared op (this binary's: the op table's rows and the elementwise
// tables') and every registered cell belongs to an op that a parity harness
// runs: this one's table, product_problems.h's (product_parity_test) or the
// elementwise tables (elementwise_parity_test).
TEST(OpParityTest, EveryDeclaredOpAndRegisteredCellHasAParityHarness) {
  link_relu_to_csr();
  std::set<std::string> covered;
  for (const OpParityRow& row : op_rows()) covered.insert(row.op);
  for (const OpRow& row : parity::table()) covered.insert(row.op);
  unary_ops::for_each([&](auto op) { covered.insert(decltype(op)::kName); });
  binary_ops::for_each([&](auto op) { covered.insert(decltype(op)::kName); });
  covered.insert(unary_ops::Clamp::kName);
  for (const OpSpec* spec : declared_ops()) {
    EXPECT_EQ(covered.count(spec->name), 1u) << spec->name << " is declared but no parity harness runs it";
  }
  int n = 0;
  for (const Dispatcher::Cell& cell : Dispatcher::instance().cells()) {
    ++n;
    EXPECT_EQ(covered.count(cell.op), 1u)
        << cell_name(cell.op, cell.formats, cell.device) << " is registered but no parity harness runs its op";
  }
  std::printf("parity coverage: %zu declared ops and %d registered cells, each of an op a harness runs\n",
              declared_ops().size(), n);
}

}  // namespace
}  // namespace coppice::parity
