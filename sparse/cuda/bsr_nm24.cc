#include "sparse/cuda/bsr_nm24.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/nm24_pack.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {

levels::LevelFormat bsr_nm24_declaration() {
  levels::LevelFormat f;
  f.block = {kBsrNm24BlockRows, kNm24StepCols};
  f.levels = {levels::dense(0), levels::compressed(1), levels::dense(2), levels::n_out_of_m(3, 2, 4)};
  return f;
}

namespace {

// The declaration's levels, index dtypes aside.
bool same_structure(const levels::LevelFormat& a, const levels::LevelFormat& b) {
  if (a.block != b.block || a.levels.size() != b.levels.size()) return false;
  for (size_t k = 0; k < a.levels.size(); ++k) {
    const levels::Level &x = a.levels[k], &y = b.levels[k];
    if (x.type != y.type || x.dim != y.dim || x.unique != y.unique || x.n != y.n || x.m != y.m) return false;
  }
  return true;
}

}  // namespace

BsrNm24Weight bsr_nm24_weight(const levels::LevelTensor& t, Device device, std::string_view op) {
  COPPICE_CHECK(same_structure(t.format, bsr_nm24_declaration()), op, ": the BSR-of-2:4 kernel takes ",
                levels::describe(bsr_nm24_declaration()), ", got ", levels::describe(t.format));
  const DType dtype = t.values.dtype();
  COPPICE_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, op, ": values must be bf16 or f16, got ",
                dtype_name(dtype));
  COPPICE_CHECK(device.is_cuda(), op, ": needs a GPU device, got ", device.to_string());
  // Parts from the host are checked here; a GPU tensor's were when it was made (level_impl.h).
  if (t.values.device().is_cpu()) levels::check_level_tensor(t, op);
  BsrNm24Weight w;
  w.shape = t.shape;
  w.block_row_ptr = t.positions[1].to(device).to(DType::kI32).contiguous();
  w.block_cols = t.coordinates[1].to(device).to(DType::kI32).contiguous();
  const int64_t rows = t.coordinates[1].numel() * kBsrNm24BlockRows, half = kNm24StepCols / 2;
  // The blocks stacked are a 2:4 tensor [nblocks * 128, 64] whose values and
  // places are the level tensor's as they are: only the metadata words are made.
  w.values = t.values.to(device).reshape({rows, half}).contiguous();
  w.metadata = empty({rows, kNm24StepCols / 8}, TensorOptions(DType::kU8, device));
  if (rows == 0) return w;
  const Tensor places = t.coordinates[3].to(device).to(DType::kU8).contiguous();
  nm24_metadata(places.data<uint8_t>(), static_cast<uint16_t*>(w.metadata.data_ptr()), rows, kNm24StepCols,
                cuda::current_stream(device.index));
  return w;
}

Tensor bsr_nm24_linear(const Tensor& x, const BsrNm24Weight& w, const Tensor& bias) {
  constexpr std::string_view op = "bsr_nm24_linear";
  const int64_t rows = w.shape[0], cols = w.shape[1];
  COPPICE_CHECK(x.dim() == 2 && x.size(1) == cols, op, ": x must be [m, ", cols, "], got ", shape_to_string(x.shape()));
  COPPICE_CHECK(x.dtype() == w.values.dtype() && x.device() == w.values.device(), op, ": x must be ",
                dtype_name(w.values.dtype()), " on ", w.values.device().to_string(), ", got ", dtype_name(x.dtype()),
                " on ", x.device().to_string());
  COPPICE_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == rows && bias.dtype() == x.dtype() &&
                                    bias.device() == x.device()),
                op, ": bias must be [", rows, "] of x's dtype and device");
  const Tensor xc = x.contiguous();
  Tensor out = empty({x.size(0), rows}, x.options());
  const cudaStream_t stream = cuda::current_stream(x.device().index);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    Nm24ProductArgs<T> a;
    a.x = static_cast<const T*>(xc.data_ptr());
    a.values = static_cast<const T*>(w.values.data_ptr());
    a.meta = static_cast<const uint16_t*>(w.metadata.data_ptr());
    a.bias = bias.defined() ? static_cast<const T*>(bias.contiguous().data_ptr()) : nullptr;
    a.out = static_cast<T*>(out.data_ptr());
    a.m = x.size(0);
    a.rows = rows;
    a.cols = cols;
    a.block_row_ptr = w.block_row_ptr.data<int32_t>();
    a.block_cols = w.block_cols.data<int32_t>();
    bsr_nm24_product<T>(a, stream);
  };
  if (x.dtype() == DType::kBF16) {
    run(__nv_bfloat16{});
  } else {
    run(__half{});
  }
  return out;
}

}  // namespace coppice::sparse_cuda
