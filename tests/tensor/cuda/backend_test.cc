// The CUDA DeviceBackend: device count, copies in every direction, synchronize.
#include <cstring>

#include "tensor/cuda/stream.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using namespace cuda_testing;

// Runs on every machine: without a GPU the backend must report 0 devices and
// refuse CUDA tensors with a clear error, never crash.
TEST(CudaBackendTest, DeviceCountNeverThrows) {
  ASSERT_NE(find_backend(DeviceType::kCuda), nullptr) << "a CUDA build registers the CUDA backend";
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda_available(), n > 0);
  EXPECT_EQ(cuda::device_count(), n);
  expect_error([&] { Tensor::empty({4}, TensorOptions(Device::cuda(n))); }, "no such device");
}

TEST(CudaBackendTest, StreamIsTheLegacyDefaultStream) {
  COPPICE_REQUIRE_GPU();
  EXPECT_EQ(cuda::current_stream(0), nullptr);
}

TEST(CudaBackendTest, RoundTripEveryDtype) {
  COPPICE_REQUIRE_GPU();
  for (DType t : all_dtypes()) {
    Tensor x = random({7, 9}, t, 1);
    Tensor g = x.to(gpu());
    EXPECT_TRUE(g.device() == gpu());
    Tensor back = g.to(Device::cpu());
    ASSERT_EQ(std::memcmp(back.data_ptr(), x.data_ptr(), x.numel() * dtype_size(t)), 0) << dtype_name(t);
  }
}

TEST(CudaBackendTest, RawCopiesInEveryDirection) {
  COPPICE_REQUIRE_GPU();
  DeviceBackend& b = backend_for(gpu());
  std::vector<float> host(1000), back(1000, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  Allocator& alloc = allocator_for(gpu());
  void* d1 = alloc.allocate(4000);
  void* d2 = alloc.allocate(4000);
  b.copy(d1, gpu(), host.data(), Device::cpu(), 4000);
  b.copy(d2, gpu(), d1, gpu(), 4000);
  b.copy(back.data(), Device::cpu(), d2, gpu(), 4000);
  EXPECT_EQ(back, host);
  b.copy(back.data(), Device::cpu(), d2, gpu(), 0);  // nothing to do
  b.synchronize(0);
  alloc.deallocate(d1, 4000);
  alloc.deallocate(d2, 4000);
}

TEST(CudaBackendTest, CopyIntoNonContiguousAndAcrossDtypes) {
  COPPICE_REQUIRE_GPU();
  Tensor src = random({4, 6}, DType::kF64, 2);
  Tensor dst = Tensor::empty({6, 4}, TensorOptions(DType::kF32, gpu()));
  dst.t().copy_(src);  // host f64 into a transposed f32 view on the GPU
  Tensor want = Tensor::empty({6, 4}, DType::kF32);
  want.t().copy_(src);
  expect_match(dst, want);
  // GPU to a non-contiguous host view, with conversion.
  Tensor host = Tensor::empty({6, 8}, DType::kF64);
  host.fill_(-1);
  host.slice(1, 0, 8, 2).copy_(dst);
  Tensor want2 = Tensor::empty({6, 8}, DType::kF64);
  want2.fill_(-1);
  want2.slice(1, 0, 8, 2).copy_(want);
  expect_match(host, want2);
}

TEST(CudaBackendTest, ItemAndSynchronize) {
  COPPICE_REQUIRE_GPU();
  Tensor g = make({3}, {1.5, -2, 4}).to(gpu());
  EXPECT_EQ(g.narrow(0, 1, 1).item(), -2.0);
  EXPECT_NO_THROW(synchronize(gpu()));
  expect_error([] { Tensor::empty({1}, TensorOptions(Device::cuda(cuda_device_count()))); }, "no such device");
}

}  // namespace
}  // namespace coppice
