// The n:m format's products on CUDA (internal): the 2:4 hardware path (which
// products sparse tensor cores take, and their launchers), the dense form
// the other products multiply, and the SDDMM gather; spmm.cc and sddmm.cc
// route to them. Two kernels run the tensor-core products: sparse wgmma on
// Hopper (nm24_wgmma.h, sm_90a) and mma.sp elsewhere (nm24_mma.h).
//
// A linear layer y = x W^T with W [out, in] 2:4 along `in` runs three products:
//   y  = x W^T      on W as it is (nm24_linear);
//   dx = dy W       on W^T, which is 2:4 along `out` only where the
//                   pattern is transposable (nm24_transposable): W^T is packed
//                   on the device at every call (values change every step),
//                   and a pattern that is not transposable goes the dense way;
//   dW = dy^T x     at W's positions: cuBLAS's dense product and a gather
//                   (nm_sddmm_values), which sparse tensor cores cannot do:
//                   they take a sparse input, never a sparse output.
#pragma once

#include <utility>

#include "sparse/nm_metadata.h"
#include "tensor/ops.h"  // GeluForm
#include "tensor/tensor.h"

namespace coppice::sparse_cuda {

// The kernels of the products on sparse tensor cores: sparse wgmma
// (nm24_wgmma.h: compute capability 9.0) and mma.sp (nm24_mma.h: every GPU
// from compute capability 8.0). The SpMM planner (spmm.cc) picks one per
// product; a launcher runs the one it is given.
enum class Nm24Kernel { kWgmma, kMmaSp };

// Whether `kernel` runs on this device the product with S as it is
// (x @ S^T: transposed false) or with S^T (x @ S: transposed true), S as
// nm24_takes (and nm24_transposable for transposed).
bool nm24_kernel_runs(Nm24Kernel kernel, const Tensor& s, bool transposed);

// Whether sparse tensor cores run x @ S^T: S a 2-D 2:4 tensor of bf16 or f16 on CUDA
// whose cols are a multiple of 64 (kNm24StepCols).
bool nm24_takes(const Tensor& s);

// Whether they also run x @ S, through S^T: S as nm24_takes, rows a multiple of
// 64, and every group of four rows storing at most two entries per column
// (checked on the device once per pattern and cached).
bool nm24_transposable(const Tensor& s);

// S's hardware form built on the device (the metadata cached per pattern),
// and S^T's (packed at every call), as the products read them: the device
// twins of pack_nm24 and pack_nm24_transposed. S as nm24_takes (and as
// nm24_transposable for the second).
Nm24Packed nm24_device_pack(const Tensor& s);
Nm24Packed nm24_device_pack_transposed(const Tensor& s);

// x @ S^T (+ bias) (relu) on sparse tensor cores; x 2-D of S's dtype and
// device, S as nm24_takes, nm24_kernel_runs(kernel, s, false).
Tensor nm24_linear(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& bias, bool relu);

// x @ S on sparse tensor cores, S as nm24_transposable,
// nm24_kernel_runs(kernel, s, true).
Tensor nm24_matmul(Nm24Kernel kernel, const Tensor& x, const Tensor& s);

// The gelu forms of the two (gelu_write_out.h), in the write-out:
// {gelu(z), z} for z = x @ S^T (+ bias), and gelu_backward(x @ S, z); with
// form == GeluForm::kTanh, gelu_tanh and gelu_tanh_backward instead. The same
// bits as the plain product, then the elementwise op.
std::pair<Tensor, Tensor> nm24_linear_gelu(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& bias,
                                           GeluForm form);
Tensor nm24_matmul_gelu_grad(Nm24Kernel kernel, const Tensor& x, const Tensor& s, const Tensor& z, GeluForm form);

// The dense form of an n:m tensor on CUDA (any n:m, any floating dtype), in
// one kernel: what the products that do not take the tensor-core path
// multiply.
Tensor nm_dense(const Tensor& s);

// dense [pattern's shape] at an n:m pattern's positions, in the values'
// layout and dense's dtype: one gather kernel (sparse * dense samples its
// dense side so; the general route builds a position map on the host per
// pattern version, 0.3 s for a 4096 x 4096 2:4 weight whose mask changes every
// step under SR-STE).
Tensor nm_sample(const Tensor& dense, const Tensor& pattern);

// The values of (a @ b) at an n:m pattern's positions: a dense product and a
// gather, for any n:m.
Tensor nm_sddmm_values(const Tensor& a, const Tensor& b, const Tensor& pattern);

}  // namespace coppice::sparse_cuda
