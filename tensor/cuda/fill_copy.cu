// fill_ and copy_ (kernels.h): any strides, broadcast source, any dtype pair.
#include <cuda_runtime.h>

#include "tensor/cuda/convert.h"
#include "tensor/cuda/elementwise.cuh"
#include "tensor/dispatcher.h"

namespace coppice::cuda {
namespace {

template <typename T>
struct FillOp {
  T* out;
  T value;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = value; }
};

template <typename D, typename S>
struct CopyOp {
  D* dst;
  const S* src;
  __device__ void operator()(const int64_t* off) const { dst[off[0]] = convert<D>(src[off[1]]); }
};

std::vector<Tensor> fill(const std::vector<Tensor>& in, const Attrs& attrs) {
  const Tensor& out = in.at(0);
  check_cuda_tensor(out, op::kFill, "tensor");
  const double value = attrs.get_double("value");
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(op::kFill, out.device().index, out.shape(), {&out},
                       FillOp<T>{static_cast<T*>(out.data_ptr()), convert<T>(value)});
  });
  return {out};
}

// True when the two views read and write exactly the same elements in the same order.
bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage().data() == b.storage().data() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

std::vector<Tensor> copy(const std::vector<Tensor>& in, const Attrs&) {
  const Tensor& dst = in.at(0);
  Tensor src = in.at(1);
  check_cuda_tensor(dst, op::kCopy, "destination");
  check_cuda_tensor(src, op::kCopy, "source");
  COPPICE_CHECK(src.device() == dst.device(), "copy_: source on ", src.device().to_string(), " and destination on ",
                dst.device().to_string(), " (cross-device copies go through Tensor::copy_)");
  COPPICE_CHECK(broadcast_shapes(src.shape(), dst.shape(), op::kCopy) == dst.shape(), "copy_: source of shape ",
                shape_to_string(src.shape()), " does not broadcast to destination ", shape_to_string(dst.shape()));
  const int device = dst.device().index;
  if (dst.numel() == 0) return {dst};
  if (src.storage().data() == dst.storage().data()) {
    if (same_view(dst, src)) return {dst};
    src = src.clone();  // the views may overlap: read the source out first
  }
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous()) {
    DeviceGuard guard(device);
    COPPICE_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.numel() * dtype_size(dst.dtype()),
                                       cudaMemcpyDeviceToDevice, current_stream(device)),
                       op::kCopy);
    return {dst};
  }
  dispatch_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      launch_elementwise(op::kCopy, device, dst.shape(), {&dst, &src},
                         CopyOp<D, S>{static_cast<D*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr())});
    });
  });
  return {dst};
}

const KernelRegistrar kFill(op::kFill, DeviceType::kCuda, {"dense"}, fill);
const KernelRegistrar kCopy(op::kCopy, DeviceType::kCuda, {"dense", "dense"}, copy);

}  // namespace
}  // namespace coppice::cuda
