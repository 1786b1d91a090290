#include "sparse/cuda/nm_products.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "sparse/cuda/nm24_mma.h"
#include "sparse/cuda/nm24_pack.h"
#include "sparse/cuda/nm24_wgmma.h"
#include "sparse/cuda/pattern_cache.h"
#include "sparse/nm.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/stream.h"
#include "tensor/dispatcher.h"
#include "tensor/ops.h"

namespace coppice::sparse_cuda {
namespace {

bool is_half(DType d) { return d == DType::kBF16 || d == DType::kF16; }

cudaStream_t stream_of(const Tensor& t) { return cuda::current_stream(t.device().index); }

template <typename F>
void by_half_dtype(DType dtype, F f) {
  switch (dtype) {
    case DType::kBF16: f(__nv_bfloat16{}); break;
    case DType::kF16: f(__half{}); break;
    default: fail("nm24: internal: dtype ", dtype_name(dtype));
  }
}

// Calls f with a value of the kernels' element type for `dtype` (f32, f64,
// bf16, f16).
template <typename F>
void by_floating_dtype(DType dtype, std::string_view op, F f) {
  switch (dtype) {
    case DType::kF32: f(float{}); break;
    case DType::kF64: f(double{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
    case DType::kF16: f(__half{}); break;
    default: fail(op, ": no n:m kernel for ", dtype_name(dtype));
  }
}

// S's metadata words (u8 [rows, cols / 8], the bytes of u16 [rows, cols / 16]),
// built once per pattern.
Tensor metadata_of(const Tensor& s, const NmImpl& nm) {
  static auto* cache = new PatternCache<Tensor>();  // never destroyed
  return cache->get(s, [&] {
    const int64_t rows = s.size(0), cols = s.size(1);
    Tensor meta = empty({rows, cols / 8}, TensorOptions(DType::kU8, s.device()));
    nm24_metadata(nm.indices().data<uint8_t>(), static_cast<uint16_t*>(meta.data_ptr()), rows, cols, stream_of(s));
    return meta;
  });
}

// x as the kernel reads it: 2-D, contiguous and 16-byte aligned.
Tensor aligned_rows(const Tensor& x) {
  Tensor c = x.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  return c;
}

// S's metadata in the order the sparse wgmma kernel reads it (u32), from its
// metadata words.
Tensor wgmma_metadata(const Tensor& meta, int64_t rows, int64_t cols) {
  Tensor out = empty({nm24_wgmma_metadata_words(rows, cols)}, TensorOptions(DType::kI32, meta.device()));
  nm24_wgmma_metadata(static_cast<const uint16_t*>(meta.data_ptr()), static_cast<uint32_t*>(out.data_ptr()), rows, cols,
                      stream_of(meta));
  return out;
}

// What the write-out applies after the product: the bias, then a relu or
// a gelu form with z in `aux` ([m, rows]; made here for a forward form).
struct WriteOut {
  Tensor bias;
  bool relu = false;
  GeluWriteOut gelu = GeluWriteOut::kNone;
  Tensor aux;
};

// out = x @ S^T from S in the hardware form (values [rows, cols / 2], meta),
// on `kernel`. The wgmma metadata is kept for `pattern`'s pattern (S itself;
// undefined: built for this call).
Tensor product(Nm24Kernel kernel, const Tensor& x_in, const Tensor& values, const Tensor& meta, int64_t rows,
               int64_t cols, WriteOut& w, const Tensor& pattern) {
  COPPICE_CHECK(kernel == Nm24Kernel::kMmaSp || nm24_wgmma_runs(cols),
                "nm24: internal: the sparse wgmma kernel does not run ", cols, " columns on this device");
  const Tensor x = aligned_rows(x_in);
  const Tensor bias = w.bias.defined() ? w.bias.contiguous() : Tensor();
  Tensor out = empty({x.size(0), rows}, TensorOptions(values.dtype(), values.device()));
  if (is_gelu_forward(w.gelu)) w.aux = empty(out.shape(), out.options());
  if (is_gelu_gradient(w.gelu)) {
    COPPICE_CHECK(w.aux.defined() && w.aux.shape() == out.shape() && w.aux.dtype() == out.dtype() &&
                      w.aux.device() == out.device(),
                  "matmul_gelu_backward: the pre-activation must be ", shape_to_string(out.shape()), " of ",
                  dtype_name(out.dtype()), " on ", out.device().to_string());
    w.aux = aligned_rows(w.aux);
  }
  Tensor wgmma_meta;
  if (kernel == Nm24Kernel::kWgmma) {
    static auto* cache = new PatternCache<Tensor>();  // never destroyed
    wgmma_meta = !pattern.defined() ? wgmma_metadata(meta, rows, cols)
                                    : cache->get(pattern, [&] { return wgmma_metadata(meta, rows, cols); });
  }
  by_half_dtype(values.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Nm24ProductArgs<T> a;
    a.x = static_cast<const T*>(x.data_ptr());
    a.values = static_cast<const T*>(values.data_ptr());
    a.meta = static_cast<const uint16_t*>(meta.data_ptr());
    a.bias = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    a.relu = w.relu;
    a.gelu = w.gelu;
    a.aux = w.aux.defined() ? static_cast<T*>(w.aux.data_ptr()) : nullptr;
    a.out = static_cast<T*>(out.data_ptr());
    a.m = x.size(0);
    a.rows = rows;
    a.cols = cols;
    if (wgmma_meta.defined()) {
      nm24_product_wgmma<T>(a, static_cast<const uint32_t*>(wgmma_meta.data_ptr()), stream_of(values));
    } else {
      nm24_product<T>(a, stream_of(values));
    }
  });
  return out;
}

bool transposable_pattern(const Tensor& s, const NmImpl& nm) {
  static auto* cache = new PatternCache<bool>();  // never destroyed
  return cache->get(s, [&] {
    Tensor flag = zeros({1}, TensorOptions(DType::kI32, s.device()));
    nm24_check_transposable(nm.indices().data<uint8_t>(), s.size(0), s.size(1), flag.data<int32_t>(), stream_of(s));
    return flag.to(Device::cpu()).data<int32_t>()[0] == 0;
  });
}

// nm_compress on the device for 2:4: the selection, values and indices in one
// kernel (attrs n and m; other n:m are not registered here, nm.cc keeps them
// on the host).
std::vector<Tensor> nm24_compress_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor dense = in[0].contiguous();
  const int64_t cols = dense.shape().back(), rows = dense.numel() / cols;
  Shape vshape = dense.shape();
  vshape.back() = cols / 2;
  Tensor values = empty(vshape, TensorOptions(dense.dtype(), dense.device()));
  Tensor indices = empty(vshape, TensorOptions(DType::kU8, dense.device()));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    nm24_select<T>(static_cast<const T*>(dense.data_ptr()), static_cast<T*>(values.data_ptr()), indices.data<uint8_t>(),
                   nullptr, rows, cols, stream_of(dense));
  };
  switch (dense.dtype()) {
    case DType::kF32: run(float{}); break;
    case DType::kBF16: run(__nv_bfloat16{}); break;
    case DType::kF16: run(__half{}); break;
    default: fail("nm_compress: no device 2:4 selection for ", dtype_name(dense.dtype()));
  }
  return {values, indices};
}

// transposable_nm_mask on the device for 2:4 (sparse/nm_transposable.h): the
// CPU twin's selection, one thread per 4 x 4 tile.
std::vector<Tensor> nm24_transposable_mask_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor w = in[0].contiguous();
  Tensor mask = empty(w.shape(), TensorOptions(DType::kBool, w.device()));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    nm24_transposable_mask<T>(static_cast<const T*>(w.data_ptr()), mask.data<bool>(), w.size(0), w.size(1),
                              stream_of(w));
  };
  by_floating_dtype(w.dtype(), "transposable_nm_mask", run);
  return {mask};
}

// nm_compress(dense, mask, 2, 4) on the device: outputs values, indices and
// the first group keeping more than two (i64 [1], -1 if none) for the
// caller's error.
std::vector<Tensor> nm24_compress_masked_kernel(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor dense = in[0].contiguous(), mask = in[1].contiguous();
  const int64_t cols = dense.shape().back(), rows = dense.numel() / cols;
  Shape vshape = dense.shape();
  vshape.back() = cols / 2;
  Tensor values = empty(vshape, TensorOptions(dense.dtype(), dense.device()));
  Tensor indices = empty(vshape, TensorOptions(DType::kU8, dense.device()));
  Tensor bad = full({1}, -1.0, TensorOptions(DType::kI64, dense.device()));  // ~0 as u64
  by_floating_dtype(dense.dtype(), "nm_compress", [&](auto tag) {
    using T = decltype(tag);
    nm24_select_masked<T>(static_cast<const T*>(dense.data_ptr()), mask.data<bool>(),
                          static_cast<T*>(values.data_ptr()), indices.data<uint8_t>(), rows, cols,
                          static_cast<unsigned long long*>(bad.data_ptr()), stream_of(dense));
  });
  return {values, indices, bad};
}

const bool kRegistered = [] {
  Dispatcher::instance().register_kernel(op::kNm24CompressMasked, DeviceType::kCuda, {"dense", "dense"},
                                         nm24_compress_masked_kernel);
  Dispatcher::instance().register_kernel(op::kNm24Compress, DeviceType::kCuda, {"dense"}, nm24_compress_kernel);
  // NmImpl::to_dense on CUDA: the one-kernel decompression (nm_dense).
  Dispatcher::instance().register_kernel(
      op::kNmToDense, DeviceType::kCuda, {"nm"},
      [](const std::vector<Tensor>& in, const Attrs&) { return std::vector<Tensor>{nm_dense(in[0])}; });
  Dispatcher::instance().register_kernel(op::kNm24TransposableMask, DeviceType::kCuda, {"dense"},
                                         nm24_transposable_mask_kernel);
  return true;
}();

}  // namespace

bool nm24_takes(const Tensor& s) {
  if (s.impl_as<NmImpl>() == nullptr || !s.device().is_cuda() || s.dim() != 2 || !is_half(s.dtype())) return false;
  const NmImpl& nm = nm_impl(s, "spmm");
  return nm.n() == 2 && nm.m() == 4 && s.size(1) % kNm24StepCols == 0;
}

bool nm24_kernel_runs(Nm24Kernel kernel, const Tensor& s, bool transposed) {
  return kernel == Nm24Kernel::kMmaSp || nm24_wgmma_runs(transposed ? s.size(0) : s.size(1));
}

bool nm24_transposable(const Tensor& s) {
  return nm24_takes(s) && s.size(0) % kNm24StepCols == 0 && transposable_pattern(s, nm_impl(s, "spmm"));
}

Nm24Packed nm24_device_pack(const Tensor& s) {
  const NmImpl& nm = nm_impl(s, "nm24");
  return {nm.values(), metadata_of(s, nm)};
}

Nm24Packed nm24_device_pack_transposed(const Tensor& s) {
  const NmImpl& nm = nm_impl(s, "nm24");
  const int64_t rows = s.size(0), cols = s.size(1);
  // S^T [cols, rows]: values [cols, rows / 2], metadata [cols, rows / 16].
  Nm24Packed t{empty({cols, rows / 2}, TensorOptions(s.dtype(), s.device())),
               empty({cols, rows / 8}, TensorOptions(DType::kU8, s.device()))};
  by_half_dtype(s.dtype(), [&](auto tag) {
    using T = decltype(tag);
    nm24_pack_transposed<T>(static_cast<const T*>(nm.values().data_ptr()), nm.indices().data<uint8_t>(),
                            static_cast<T*>(t.values.data_ptr()), static_cast<uint16_t*>(t.metadata.data_ptr()), rows,
                            cols, stream_of(s));
  });
  return t;
}

Tensor nm24_linear(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& bias, bool relu) {
  const Nm24Packed w = nm24_device_pack(s);
  WriteOut out{bias, relu, GeluWriteOut::kNone, Tensor()};
  return product(kernel, x, w.values, w.metadata, s.size(0), s.size(1), out, s);
}

std::pair<Tensor, Tensor> nm24_linear_gelu(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& bias,
                                           GeluForm form) {
  const Nm24Packed w = nm24_device_pack(s);
  WriteOut out{bias, false, gelu_write_out(/*gradient=*/false, form == GeluForm::kTanh), Tensor()};
  Tensor y = product(kernel, x, w.values, w.metadata, s.size(0), s.size(1), out, s);
  return {y, out.aux};
}

Tensor nm24_matmul(Nm24Kernel kernel, const Tensor& x, const Tensor& s) {
  const Nm24Packed wt = nm24_device_pack_transposed(s);
  WriteOut out{Tensor(), false, GeluWriteOut::kNone, Tensor()};
  return product(kernel, x, wt.values, wt.metadata, s.size(1), s.size(0), out, Tensor());
}

Tensor nm24_matmul_gelu_grad(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& z, GeluForm form) {
  const Nm24Packed wt = nm24_device_pack_transposed(s);
  WriteOut out{Tensor(), false, gelu_write_out(/*gradient=*/true, form == GeluForm::kTanh), z};
  return product(kernel, x, wt.values, wt.metadata, s.size(1), s.size(0), out, Tensor());
}

Tensor nm_dense(const Tensor& s) {
  const NmImpl& nm = nm_impl(s, "nm_dense");
  const int64_t cols = s.shape().back(), rows = cols == 0 ? 0 : s.numel() / cols;
  Tensor out = empty(s.shape(), TensorOptions(s.dtype(), s.device()));
  by_floating_dtype(s.dtype(), "nm_dense", [&](auto tag) {
    using T = decltype(tag);
    nm_scatter<T>(static_cast<const T*>(nm.values().data_ptr()), nm.indices().data<uint8_t>(),
                  static_cast<T*>(out.data_ptr()), rows, cols, static_cast<int>(nm.n()), static_cast<int>(nm.m()),
                  stream_of(s));
  });
  return out;
}

Tensor nm_sample(const Tensor& dense_in, const Tensor& pattern) {
  const NmImpl& nm = nm_impl(pattern, "nm_sample");
  const Tensor dense = dense_in.contiguous();
  Tensor out = empty(nm.values().shape(), TensorOptions(dense.dtype(), dense.device()));
  const int64_t cols = pattern.shape().back(), rows = cols == 0 ? 0 : pattern.numel() / cols;
  by_floating_dtype(dense.dtype(), "nm_sample", [&](auto tag) {
    using T = decltype(tag);
    nm_gather<T>(static_cast<const T*>(dense.data_ptr()), nm.indices().data<uint8_t>(), static_cast<T*>(out.data_ptr()),
                 rows, cols, static_cast<int>(nm.n()), static_cast<int>(nm.m()), stream_of(dense));
  });
  return out;
}

Tensor nm_sddmm_values(const Tensor& a, const Tensor& b, const Tensor& pattern) {
  const NmImpl& nm = nm_impl(pattern, op::kSddmm);
  const Tensor prod = matmul(a, b).contiguous();
  Tensor out = empty(nm.values().shape(), TensorOptions(pattern.dtype(), pattern.device()));
  const int64_t rows = pattern.size(0), cols = pattern.size(1);
  const int n = static_cast<int>(nm.n()), m = static_cast<int>(nm.m());
  const uint8_t* idx = nm.indices().data<uint8_t>();
  const cudaStream_t stream = stream_of(pattern);
  by_floating_dtype(pattern.dtype(), op::kSddmm, [&](auto tag) {
    using T = decltype(tag);
    nm_gather<T>(static_cast<const T*>(prod.data_ptr()), idx, static_cast<T*>(out.data_ptr()), rows, cols, n, m,
                 stream);
  });
  return out;
}

}  // namespace coppice::sparse_cuda
