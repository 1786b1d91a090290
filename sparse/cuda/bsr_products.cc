#include "sparse/cuda/bsr_products.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sparse/bsr.h"
#include "sparse/cuda/bsr_mma.h"
#include "sparse/cuda/bsr_tiles.h"
#include "sparse/cuda/bsr_wgmma.h"
#include "sparse/cuda/bsr_wgmma32_grads.h"
#include "sparse/cuda/linear_grads_plan.h"
#include "sparse/cuda/pattern_cache.h"
#include "sparse/cuda/sddmm_dispatch.h"
#include "sparse/route_choices.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/op_table.h"
#include "tensor/ops.h"
#include "tensor/precision.h"

namespace coppice::sparse_cuda {
namespace {

// The indices of ptr's rows (ptr [rows + 1]), longest first, ties by index:
// the order the mma.sync product takes block rows in, so that the last
// thread blocks to start are the shortest.
std::vector<int32_t> longest_first(const std::vector<int32_t>& ptr) {
  std::vector<int32_t> order(ptr.size() - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return ptr[static_cast<size_t>(x) + 1] - ptr[static_cast<size_t>(x)] >
           ptr[static_cast<size_t>(y) + 1] - ptr[static_cast<size_t>(y)];
  });
  return order;
}

// S's blocks listed by block column (the block rows of S^T): ptr [block
// columns + 1], and per entry the block row and the stored block's index;
// `order` is longest_first(ptr). For the one-pass linear gradients
// (linear_grads_plan.h): each column's blocks that sum their block row for
// the bias, the block rows without a block, and the longest column.
struct BlockColumns {
  Tensor ptr, block_row, block_id, order;  // i32, on the device
  Tensor sum_mask, empty_rows;             // u32 bits as i32, i32; on the device
  int64_t nempty = 0;
  int most = 0;
};

std::shared_ptr<const BlockColumns> build_columns(const BsrImpl& b, Device device) {
  const std::vector<int32_t> crow = b.crow_indices().to(Device::cpu()).to_vector<int32_t>();
  const std::vector<int32_t> bcol = b.col_indices().to(Device::cpu()).to_vector<int32_t>();
  const int64_t block_cols = b.block_col_count();
  std::vector<int32_t> ptr(static_cast<size_t>(block_cols) + 1, 0), row(bcol.size()), id(bcol.size());
  for (int32_t c : bcol) ++ptr[static_cast<size_t>(c) + 1];
  for (size_t c = 0; c < static_cast<size_t>(block_cols); ++c) ptr[c + 1] += ptr[c];
  std::vector<int32_t> next(ptr.begin(), ptr.end() - 1);
  for (size_t r = 0; r + 1 < crow.size(); ++r) {  // rows ascending: each column's entries come out sorted
    for (int32_t e = crow[r]; e < crow[r + 1]; ++e) {
      const auto slot = static_cast<size_t>(next[static_cast<size_t>(bcol[static_cast<size_t>(e)])]++);
      row[slot] = static_cast<int32_t>(r);
      id[slot] = e;
    }
  }
  auto out = std::make_shared<BlockColumns>();
  const auto n = static_cast<int64_t>(bcol.size());
  out->ptr = from_vector(ptr, {block_cols + 1}).to(device);
  out->block_row = from_vector(row, {n}).to(device);
  out->block_id = from_vector(id, {n}).to(device);
  out->order = from_vector(longest_first(ptr), {block_cols}).to(device);
  const int64_t block_rows = b.block_row_count();
  const std::vector<uint32_t> masks = linear_grads_sum_masks(ptr, row, block_rows);
  out->sum_mask = from_vector(std::vector<int32_t>(masks.begin(), masks.end()), {block_cols}).to(device);
  const std::vector<int32_t> empty = empty_block_rows(row, block_rows);
  out->nempty = static_cast<int64_t>(empty.size());
  out->empty_rows =
      from_vector(empty.empty() ? std::vector<int32_t>{0} : empty, {std::max<int64_t>(out->nempty, 1)}).to(device);
  for (size_t c = 0; c + 1 < ptr.size(); ++c) out->most = std::max(out->most, ptr[c + 1] - ptr[c]);
  return out;
}

std::shared_ptr<const BlockColumns> block_columns(const Tensor& s, const BsrImpl& b) {
  static auto* cache = new PatternCache<std::shared_ptr<const BlockColumns>>();  // never destroyed
  return cache->get(s, [&] { return build_columns(b, s.device()); });
}

// S's block rows longest first (longest_first of crow), on the device.
Tensor block_row_order(const Tensor& s, const BsrImpl& b) {
  static auto* cache = new PatternCache<Tensor>();  // never destroyed
  return cache->get(s, [&] {
    const std::vector<int32_t> crow = b.crow_indices().to(Device::cpu()).to_vector<int32_t>();
    return from_vector(longest_first(crow), {b.block_row_count()}).to(s.device());
  });
}

// The runs of at most bsr_mma_sddmm_group stored blocks, within one block
// row each and as even as the row allows (sddmm_runs), that the SDDMM
// kernels take per thread block: begin [runs + 1] and the block row of each,
// on the device; the block rows without a stored block (for the row sums);
// and the wgmma kernel's count of ranges of k, worked out once for each k,
// SM count and row-sum choice this pattern meets (sddmm_dispatch_splits
// simulates the launch, runs x ranges steps).
struct SddmmGroups {
  Tensor begin, row, empty;
  int64_t count = 0, nempty = 0;
  int most = 0;  // blocks per run at most
  SddmmRuns runs;

  int wgmma_splits(int64_t k, int64_t sms, bool row_sums) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Splits& m : memo_) {
      if (m.k == k && m.sms == sms && m.row_sums == row_sums) return m.splits;
    }
    const int splits = sddmm_dispatch_splits(runs, row_sums, most, k, bsr_sddmm_most_splits(k), sms);
    memo_.push_back({k, sms, row_sums, splits});
    return splits;
  }

 private:
  struct Splits {
    int64_t k, sms;
    bool row_sums;
    int splits;
  };
  mutable std::mutex mutex_;
  mutable std::vector<Splits> memo_;
};

std::shared_ptr<const SddmmGroups> sddmm_groups(const Tensor& pattern, const BsrImpl& b) {
  static auto* cache = new PatternCache<std::shared_ptr<const SddmmGroups>>();  // never destroyed
  return cache->get(pattern, [&] {
    const std::vector<int32_t> crow = b.crow_indices().to(Device::cpu()).to_vector<int32_t>();
    const int64_t rows = static_cast<int64_t>(crow.size()) - 1;
    auto out = std::make_shared<SddmmGroups>();
    out->most = bsr_mma_sddmm_group(static_cast<int>(b.block_rows()),
                                    rows > 0 ? static_cast<double>(crow.back()) / static_cast<double>(rows) : 0.0);
    out->runs = sddmm_runs(crow, out->most);
    const SddmmRuns& runs = out->runs;
    out->count = runs.count();
    out->begin = from_vector(runs.begin, {out->count + 1}).to(pattern.device());
    out->row = from_vector(runs.row.empty() ? std::vector<int32_t>{0} : runs.row, {std::max<int64_t>(out->count, 1)})
                   .to(pattern.device());
    out->nempty = static_cast<int64_t>(runs.empty.size());
    out->empty =
        from_vector(runs.empty.empty() ? std::vector<int32_t>{0} : runs.empty, {std::max<int64_t>(out->nempty, 1)})
            .to(pattern.device());
    return std::shared_ptr<const SddmmGroups>(out);
  });
}

TileMath math_for(DType dtype) {
  if (dtype != DType::kF32) return TileMath::kHalf;
  return allow_tf32() ? TileMath::kTf32 : TileMath::kF32;
}

// A 2-D tensor's element (r, c) as data[r * row_stride + c * col_stride]
// (transposed when `transposed`); made contiguous first unless both strides
// are positive (a broadcast view has a zero stride).
template <typename T>
StridedMatrix<const T> strided(Tensor& keep, const Tensor& t, bool transposed) {
  keep = t.stride(0) > 0 && t.stride(1) > 0 ? t : t.contiguous();
  StridedMatrix<const T> m;
  m.data = static_cast<const T*>(keep.data_ptr());
  m.row_stride = transposed ? keep.stride(1) : keep.stride(0);
  m.col_stride = transposed ? keep.stride(0) : keep.stride(1);
  return m;
}

// What a product's write-out applies after the product: the bias, then a
// relu, or a gelu form (GeluWriteOut) with z in `aux` (y's shape,
// contiguous); or the bias, then after the rounding `residual` (y's shape,
// contiguous) added.
struct WriteOut {
  Tensor bias;
  bool relu = false;
  GeluWriteOut gelu = GeluWriteOut::kNone;
  Tensor aux;
  Tensor residual;
};

// Runs the product into y; false, having launched nothing, where a residual
// is asked for and the route cannot add it (only the wgmma kernels do).
template <typename T>
bool run_product(BsrKernel kernel, const Tensor& s, const BsrImpl& b, bool walk_transposed, const Tensor& x,
                 bool x_transposed, Tensor& y, bool y_transposed, int64_t n, const WriteOut& out) {
  BsrProductArgs<T> p;
  p.bias = out.bias.defined() ? static_cast<const T*>(out.bias.data_ptr()) : nullptr;
  p.relu = out.relu;
  p.gelu = out.gelu;
  std::shared_ptr<const BlockColumns> columns;
  Tensor row_order;
  const bool mma = kernel == BsrKernel::kMmaSync;
  COPPICE_CHECK(p.gelu == GeluWriteOut::kNone || mma, "bsr tiles: internal: a gelu write-out off the mma.sync kernels");
  if (walk_transposed) {
    columns = block_columns(s, b);
    p.ptr = columns->ptr.data<int32_t>();
    p.kblk = columns->block_row.data<int32_t>();
    p.bid = columns->block_id.data<int32_t>();
    p.out_block_rows = b.block_col_count();
    if (mma) p.row_order = columns->order.data<int32_t>();
  } else {
    p.ptr = b.crow_indices().data<int32_t>();
    p.kblk = b.col_indices().data<int32_t>();
    p.out_block_rows = b.block_row_count();
    if (mma) {
      row_order = block_row_order(s, b);
      p.row_order = row_order.data<int32_t>();
    }
  }
  p.values = static_cast<const T*>(b.values().data_ptr());
  p.bh = static_cast<int>(b.block_rows());
  p.bw = static_cast<int>(b.block_cols());
  p.transposed = walk_transposed;
  p.n = n;
  p.inner = walk_transposed ? s.size(0) : s.size(1);
  p.nblocks = b.nblocks();
  Tensor x_keep;
  p.x = strided<T>(x_keep, x, x_transposed);
  p.y.data = static_cast<T*>(y.data_ptr());
  p.y.row_stride = y_transposed ? 1 : y.stride(0);
  p.y.col_stride = y_transposed ? y.stride(0) : 1;
  if (out.gelu != GeluWriteOut::kNone) {
    p.aux.data = static_cast<T*>(out.aux.data_ptr());
    p.aux.row_stride = p.y.row_stride;
    p.aux.col_stride = p.y.col_stride;
  }
  if (out.residual.defined()) {
    p.residual.data = static_cast<const T*>(out.residual.data_ptr());
    p.residual.row_stride = p.y.row_stride;
    p.residual.col_stride = p.y.col_stride;
  }
  if (p.out_block_rows <= 0 || n <= 0) return true;
  const cudaStream_t stream = cuda::current_stream(s.device().index);
  if constexpr (sizeof(T) == 2) {
    // On Hopper the wgmma kernels take the 32x32, 64x64 and 128x128 products
    // of a linear's shapes wherever they run (bsr_wgmma.h), unless pinned to
    // mma.sync.
    if (mma && route_pin("bsr_tiles") != "mma_sync" && bsr_wgmma_runs<T>(p)) {
      bsr_wgmma_product<T>(p, stream);
      return true;
    }
  }
  if (out.residual.defined()) return false;
  if (mma) {
    bsr_mma_product<T>(p, stream);
  } else {
    bsr_tiled_product<T>(p, math_for(s.dtype()), stream);
  }
  return true;
}

template <typename F>
void by_dtype(DType dtype, F f) {
  switch (dtype) {
    case DType::kF32: f(float{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
    case DType::kF16: f(__half{}); break;
    default: fail("bsr tiles: internal: dtype ", dtype_name(dtype));
  }
}

}  // namespace

std::string_view bsr_kernel_name(BsrKernel kernel) { return kernel == BsrKernel::kMmaSync ? "mma_sync" : "tiles"; }

bool bsr_kernel_takes(BsrKernel kernel, const Tensor& s) {
  if (s.impl_as<BsrImpl>() == nullptr || !s.device().is_cuda()) return false;
  const DType d = s.dtype();
  if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) return false;
  const BsrImpl& b = bsr_impl(s, "bsr kernels");
  if (kernel == BsrKernel::kMmaSync) {
    return (d != DType::kF32 || allow_tf32()) &&
           bsr_mma_takes(static_cast<int>(b.block_rows()), static_cast<int>(b.block_cols()));
  }
  const auto side = [](int64_t v) { return v == 16 || v == 32; };
  return side(b.block_rows()) && side(b.block_cols());
}

namespace {

// The product with `out` applied in the write-out; out.aux, for a forward
// gelu form (kForward, kForwardTanh), is allocated here (y's shape) and left
// in `out`. Undefined where out.residual is asked for and no kernel adds it
// (run_product), or S has no stored block.
Tensor matmul_with(BsrKernel kernel, const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                   std::string_view op, WriteOut& out) {
  const BsrImpl& b = bsr_impl(s, op);
  COPPICE_CHECK(bsr_kernel_takes(kernel, s), op, ": internal: the ", bsr_kernel_name(kernel),
                " BSR kernel does not take ", dtype_name(s.dtype()), " blocks ", b.block_rows(), "x", b.block_cols());
  COPPICE_CHECK(out.gelu == GeluWriteOut::kNone || kernel == BsrKernel::kMmaSync, op,
                ": internal: a gelu write-out off the mma.sync kernels");
  COPPICE_CHECK(x.dim() == 2, op, ": dense operand must be 2-D, got shape ", shape_to_string(x.shape()));
  COPPICE_CHECK(x.dtype() == s.dtype() && x.device() == s.device(), op,
                ": operands must share one dtype and device, got ", dtype_name(s.dtype()), " on ",
                s.device().to_string(), " and ", dtype_name(x.dtype()), " on ", x.device().to_string());
  const int64_t m = transpose_s ? s.size(1) : s.size(0), inner = transpose_s ? s.size(0) : s.size(1);
  const int64_t x_inner = sparse_left ? x.size(0) : x.size(1);
  COPPICE_CHECK(x_inner == (sparse_left ? inner : m), op, ": inner dimensions differ: sparse ",
                shape_to_string(s.shape()), transpose_s ? " (transposed)" : "", " and dense ",
                shape_to_string(x.shape()), sparse_left ? " on the right" : " on the left");
  // x @ op(S) = (op(S)^T @ x^T)^T: the kernel computes op'(S) @ x' into y'.
  const bool walk_transposed = sparse_left ? transpose_s : !transpose_s;
  const int64_t out_rows = walk_transposed ? s.size(1) : s.size(0);
  const int64_t n = sparse_left ? x.size(1) : x.size(0);
  COPPICE_CHECK((n + 63) / 64 < 65536, op, ": ", n, " dense columns exceed the BSR kernel's grid");
  const TensorOptions opts(s.dtype(), s.device());
  if (out.bias.defined()) {
    const Tensor& bias = out.bias;
    COPPICE_CHECK(bias.is_dense() && bias.dim() == 1 && bias.size(0) == out_rows && bias.dtype() == s.dtype() &&
                      bias.device() == s.device(),
                  op, ": bias must be dense [", out_rows, "] of ", dtype_name(s.dtype()), " on ",
                  s.device().to_string(), ", got ", shape_to_string(bias.shape()), " ", dtype_name(bias.dtype()));
    out.bias = bias.contiguous();
  }
  const Shape y_shape = sparse_left ? Shape{out_rows, n} : Shape{n, out_rows};
  if (is_gelu_gradient(out.gelu)) {
    COPPICE_CHECK(out.aux.defined() && out.aux.is_dense() && out.aux.shape() == y_shape &&
                      out.aux.dtype() == s.dtype() && out.aux.device() == s.device(),
                  op, ": the pre-activation must be dense ", shape_to_string(y_shape), " of ", dtype_name(s.dtype()),
                  " on ", s.device().to_string(), ", got ",
                  out.aux.defined() ? str_cat(shape_to_string(out.aux.shape()), " ", dtype_name(out.aux.dtype()),
                                              " on ", out.aux.device().to_string())
                                    : std::string("none"));
    out.aux = out.aux.contiguous();
  }
  if (out.residual.defined()) {
    COPPICE_CHECK(out.gelu == GeluWriteOut::kNone && !out.relu, op,
                  ": internal: a residual beside a relu or gelu write-out");
    COPPICE_CHECK(out.residual.is_dense() && out.residual.shape() == y_shape && out.residual.dtype() == s.dtype() &&
                      out.residual.device() == s.device(),
                  op, ": the residual must be dense ", shape_to_string(y_shape), " of ", dtype_name(s.dtype()), " on ",
                  s.device().to_string(), ", got ", shape_to_string(out.residual.shape()), " ",
                  dtype_name(out.residual.dtype()), " on ", out.residual.device().to_string());
    if (b.nblocks() == 0) return Tensor();  // no kernel runs: the caller adds
    out.residual = out.residual.contiguous();
  }
  // No stored block: the plain product (the bias or zeros) and the
  // elementwise op of the form after it.
  if (out.gelu != GeluWriteOut::kNone && b.nblocks() == 0) {
    WriteOut plain{out.bias, false, GeluWriteOut::kNone, Tensor(), Tensor()};
    Tensor y = matmul_with(kernel, s, transpose_s, x, sparse_left, op, plain);
    const GeluForm form = is_gelu_tanh(out.gelu) ? GeluForm::kTanh : GeluForm::kErf;
    if (is_gelu_gradient(out.gelu)) return gelu_backward_of_form(y, out.aux, form);
    out.aux = y;
    return gelu_of_form(y, form);
  }
  Tensor y = Tensor::empty(y_shape, opts);
  if (is_gelu_forward(out.gelu)) out.aux = Tensor::empty(y_shape, opts);
  if (y.numel() == 0) return y;
  if (b.nblocks() == 0) {
    if (!out.bias.defined()) return zeros(y.shape(), opts);
    Tensor only_bias = add(zeros(y.shape(), opts), sparse_left ? out.bias.unsqueeze(1) : out.bias);
    return out.relu ? coppice::relu(only_bias) : only_bias;
  }
  cuda::DeviceGuard guard(s.device().index);
  bool ran = false;
  by_dtype(s.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ran = run_product<T>(kernel, s, b, walk_transposed, x, !sparse_left, y, !sparse_left, n, out);
  });
  if (!ran) return Tensor();
  cuda::check_launch(op);
  return y;
}

}  // namespace

Tensor bsr_matmul(BsrKernel kernel, const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                  std::string_view op, const Tensor& bias, bool relu) {
  WriteOut out{bias, relu, GeluWriteOut::kNone, Tensor(), Tensor()};
  return matmul_with(kernel, s, transpose_s, x, sparse_left, op, out);
}

Tensor bsr_matmul_add(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left, std::string_view op,
                      const Tensor& bias, const Tensor& residual) {
  COPPICE_CHECK(residual.defined(), op, ": internal: bsr_matmul_add without a residual");
  WriteOut out{bias, false, GeluWriteOut::kNone, Tensor(), residual};
  return matmul_with(BsrKernel::kMmaSync, s, transpose_s, x, sparse_left, op, out);
}

std::pair<Tensor, Tensor> bsr_mma_matmul_gelu(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                              std::string_view op, const Tensor& bias, GeluForm form) {
  WriteOut out{bias, false, gelu_write_out(/*gradient=*/false, form == GeluForm::kTanh), Tensor(), Tensor()};
  Tensor y = matmul_with(BsrKernel::kMmaSync, s, transpose_s, x, sparse_left, op, out);
  return {y, out.aux};
}

Tensor bsr_mma_matmul_gelu_grad(const Tensor& s, bool transpose_s, const Tensor& x, bool sparse_left,
                                std::string_view op, const Tensor& z, GeluForm form) {
  WriteOut out{Tensor(), false, gelu_write_out(/*gradient=*/true, form == GeluForm::kTanh), z, Tensor()};
  return matmul_with(BsrKernel::kMmaSync, s, transpose_s, x, sparse_left, op, out);
}

Tensor bsr_sddmm_values(BsrKernel kernel, const Tensor& a, const Tensor& b_in, const Tensor& pattern,
                        Tensor* row_sums) {
  constexpr std::string_view op = op::kSddmm;
  const BsrImpl& b = bsr_impl(pattern, op);
  COPPICE_CHECK(bsr_kernel_takes(kernel, pattern), op, ": internal: the ", bsr_kernel_name(kernel),
                " BSR kernel does not take ", dtype_name(pattern.dtype()), " blocks ", b.block_rows(), "x",
                b.block_cols());
  const TensorOptions opts(pattern.dtype(), pattern.device());
  Tensor values = Tensor::empty(b.values().shape(), opts);
  // The kernels that do not sum a's rows themselves: a pass of its own.
  auto sum_rows_apart = [&] {
    if (row_sums != nullptr) *row_sums = sum(a, {1});
  };
  if (b.nblocks() == 0) {
    sum_rows_apart();
    return values;
  }
  cuda::DeviceGuard guard(pattern.device().index);
  by_dtype(pattern.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BsrSddmmArgs<T> p;
    p.crow = b.crow_indices().data<int32_t>();
    p.bcol = b.col_indices().data<int32_t>();
    p.block_rows = b.block_row_count();
    p.nblocks = b.nblocks();
    p.bh = static_cast<int>(b.block_rows());
    p.bw = static_cast<int>(b.block_cols());
    p.k = a.size(1);
    Tensor a_keep, b_keep;
    p.a = strided<T>(a_keep, a, false);
    p.b = strided<T>(b_keep, b_in, false);
    p.values = static_cast<T*>(values.data_ptr());
    std::shared_ptr<const SddmmGroups> groups;
    Tensor partial, row_partial;
    bool wgmma = false;
    p.b_cols = pattern.size(1);
    if (kernel == BsrKernel::kMmaSync) {
      groups = sddmm_groups(pattern, b);
      p.group_begin = groups->begin.data<int32_t>();
      p.group_row = groups->row.data<int32_t>();
      p.ngroups = groups->count;
      p.group = groups->most;
      // On Hopper a linear's weight gradient in 32x32, 64x64 and 128x128
      // blocks runs on wgmma (bsr_wgmma.h), unless pinned to mma.sync; each
      // kernel has its own rule for splitting k.
      if constexpr (sizeof(T) == 2) { wgmma = route_pin("bsr_tiles") != "mma_sync" && bsr_wgmma_sddmm_runs<T>(p); }
      const int64_t sms = cuda::sm_count(pattern.device().index, op);
      p.splits = wgmma ? groups->wgmma_splits(p.k, bsr_wgmma_sddmm_resident(p.bh, p.group) * sms, row_sums != nullptr)
                       : bsr_mma_sddmm_splits(p.ngroups, p.k, bsr_mma_sddmm_resident<T>(p) * sms);
      if (p.splits > 1) {
        p.split_k = sddmm_split_k(p.k, p.splits);
        p.splits = static_cast<int>(sddmm_ranges(p.k, p.split_k));
        partial = Tensor::empty({p.splits * values.numel()}, TensorOptions(DType::kF32, pattern.device()));
        p.partial = partial.data<float>();
      }
    }
    const cudaStream_t stream = cuda::current_stream(pattern.device().index);
    if (kernel == BsrKernel::kMmaSync) {
      if (row_sums != nullptr) {
        *row_sums = Tensor::empty({a.size(0)}, opts);
        p.row_sums = static_cast<T*>(row_sums->data_ptr());
        p.empty_rows = groups->empty.data<int32_t>();
        p.nempty = groups->nempty;
        if (p.splits > 1) {
          row_partial = Tensor::empty({p.splits * a.size(0)}, TensorOptions(DType::kF32, pattern.device()));
          p.row_sum_partial = row_partial.data<float>();
        }
      }
      if constexpr (sizeof(T) == 2) {
        if (wgmma) {
          bsr_wgmma_sddmm<T>(p, stream);
          if (p.splits > 1) bsr_sum_splits<T>(p, stream);
          return;
        }
      }
      bsr_mma_sddmm<T>(p, stream);
    } else {
      bsr_tiled_sddmm<T>(p, math_for(pattern.dtype()), stream);
      sum_rows_apart();
    }
  });
  cuda::check_launch(op);
  return values;
}

BsrLinearGrads bsr_linear_grads(const Tensor& dy, const Tensor& x, const Tensor& s, bool with_bias, const Tensor& z,
                                GeluForm form) {
  if (route_pin("linear_grads") == "apart" || route_pin("bsr_tiles").has_value()) return {};
  if (s.impl_as<BsrImpl>() == nullptr || !s.device().is_cuda()) return {};
  const DType dtype = s.dtype();
  if (dtype != DType::kBF16 && dtype != DType::kF16) return {};
  const BsrImpl& b = bsr_impl(s, op::kLinearGrads);
  if (b.block_rows() != 32 || b.block_cols() != 32 || b.nblocks() == 0) return {};
  const int64_t n = dy.size(0), out = s.size(0), in = s.size(1);
  // TMA: contiguous rows with 16-byte aligned bases and pitches, coordinates in int32.
  const auto takes = [](const Tensor& t) {
    return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  if (!takes(dy) || !takes(x) || (z.defined() && !takes(z)) || !takes(b.values())) return {};
  if (n <= 0 || n >= (int64_t{1} << 31) || b.nblocks() * 32 >= (int64_t{1} << 31)) return {};
  const std::shared_ptr<const BlockColumns> columns = block_columns(s, b);
  if (columns->most > kLinearGradsMostBlocks) return {};
  const int device = s.device().index;
  if (!cuda::runs_sm90a(device, op::kLinearGrads)) return {};
  cuda::DeviceGuard guard(device);
  const TensorOptions opts(dtype, s.device());
  BsrLinearGrads grads;
  grads.dx = Tensor::empty(x.shape(), opts);
  grads.dw = Tensor::empty(b.values().shape(), opts);
  if (with_bias) grads.db = Tensor::empty({out}, opts);
  Tensor dw_partial, db_partial;
  by_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      BsrLinearGradsArgs<T> p;
      p.dy = static_cast<const T*>(dy.data_ptr());
      p.x = static_cast<const T*>(x.data_ptr());
      p.z = z.defined() ? static_cast<const T*>(z.data_ptr()) : nullptr;
      p.dx = static_cast<T*>(grads.dx.data_ptr());
      p.n = n;
      p.out = out;
      p.in = in;
      p.gelu = z.defined() ? gelu_write_out(/*gradient=*/true, form == GeluForm::kTanh) : GeluWriteOut::kNone;
      p.values = static_cast<const T*>(b.values().data_ptr());
      p.nblocks = b.nblocks();
      p.block_cols = b.block_col_count();
      p.col_ptr = columns->ptr.data<int32_t>();
      p.col_row = columns->block_row.data<int32_t>();
      p.col_id = columns->block_id.data<int32_t>();
      p.col_order = columns->order.data<int32_t>();
      p.most = columns->most;
      p.dw = static_cast<T*>(grads.dw.data_ptr());
      if (with_bias) {
        p.db = static_cast<T*>(grads.db.data_ptr());
        p.sum_mask = reinterpret_cast<const uint32_t*>(columns->sum_mask.data<int32_t>());
        p.empty_rows = columns->empty_rows.data<int32_t>();
        p.nempty = columns->nempty;
      }
      const int splits =
          linear_grads_splits(p.block_cols, n, kLinearGradsStep, cuda::sm_count(device, op::kLinearGrads));
      const int64_t steps = (n + kLinearGradsStep - 1) / kLinearGradsStep;
      p.splits = splits;  // ranges of split_n tokens: exactly `splits` of them (linear_grads_splits rounds so)
      p.split_n = (steps + splits - 1) / splits * kLinearGradsStep;
      const TensorOptions f32(DType::kF32, s.device());
      if (p.splits > 1) {
        dw_partial = Tensor::empty({p.splits * grads.dw.numel()}, f32);
        p.dw_partial = dw_partial.data<float>();
        if (with_bias) {
          db_partial = Tensor::empty({p.splits * out}, f32);
          p.db_partial = db_partial.data<float>();
        }
      }
      const cudaStream_t stream = cuda::current_stream(device);
      bsr_wgmma32_linear_grads<T>(p, stream);
      if (p.splits > 1) {
        // The ranges' partial sums added in range order (the SDDMM's pass).
        BsrSddmmArgs<T> sums;
        sums.values = p.dw;
        sums.partial = p.dw_partial;
        sums.nblocks = p.nblocks;
        sums.bh = sums.bw = 32;
        sums.splits = p.splits;
        sums.block_rows = b.block_row_count();
        sums.row_sums = p.db;
        sums.row_sum_partial = p.db_partial;
        bsr_sum_splits<T>(sums, stream);
      }
    }
  });
  cuda::check_launch(op::kLinearGrads);
  return grads;
}

}  // namespace coppice::sparse_cuda
