// run_in_foreign_capture (tensor/backend.h): Coppice's work recorded into a
// CUDA graph that another library captures on its own stream, as PyTorch's
// torch.cuda.graph does. The graph recomputes from its inputs at each launch,
// its memory stays its own until it is destroyed, and what cannot join a
// capture is refused by name.
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using cuda_testing::gpu;

// A stream captured as PyTorch captures (global mode), ended into an
// executable graph.
class ForeignCapture {
 public:
  ForeignCapture() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  }
  ~ForeignCapture() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  void* stream() const { return stream_; }
  // Ends the capture; true when it made an executable graph.
  bool end() {
    if (cudaStreamEndCapture(stream_, &graph_) != cudaSuccess) return false;
    return cudaGraphInstantiate(&exec_, graph_, 0) == cudaSuccess;
  }
  void launch() {
    ASSERT_EQ(cudaGraphLaunch(exec_, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

TEST(ForeignCaptureTest, LaunchesRecomputeFromCurrentInputs) {
  COPPICE_REQUIRE_GPU();
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2}).to(gpu());
  Tensor w = from_vector<float>({1, 0, 0, 2}, {2, 2}).to(gpu());
  (void)add(matmul(x, w), 1.0);  // warm: cuBLAS's handle, kernels loaded
  synchronize(gpu());
  Tensor y;
  ForeignCapture capture;
  run_in_foreign_capture(gpu(), capture.stream(), [&] { y = add(matmul(x, w), 1.0); });
  ASSERT_TRUE(capture.end());
  capture.launch();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{2, 5, 4, 9}));
  x.copy_(from_vector<float>({0, 1, 1, 0}, {2, 2}));
  synchronize(gpu());
  capture.launch();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{1, 3, 2, 1}));
}

TEST(ForeignCaptureTest, CallsOfOneCaptureShareItsPoolUntilTheGraphIsDestroyed) {
  COPPICE_REQUIRE_GPU();
  Tensor x = full({1024}, 1.0, TensorOptions(DType::kF32, gpu()));
  (void)mul(x, 2.0);
  synchronize(gpu());
  void* temp_ptr = nullptr;
  Tensor kept;
  {
    ForeignCapture capture;
    // Two calls, as two layers would make them: the second finds the block the
    // first freed (the capture's stream orders them).
    run_in_foreign_capture(gpu(), capture.stream(), [&] {
      Tensor temp = mul(x, 2.0);
      temp_ptr = temp.data_ptr();
    });
    run_in_foreign_capture(gpu(), capture.stream(), [&] { kept = mul(x, 3.0); });
    EXPECT_EQ(kept.data_ptr(), temp_ptr);
    ASSERT_TRUE(capture.end());
    // Eager tensors of the same size class must not land on the graph's blocks.
    std::vector<Tensor> eager;
    for (int i = 0; i < 4; ++i) {
      eager.push_back(empty({1024}, TensorOptions(DType::kF32, gpu())));
      EXPECT_NE(eager.back().data_ptr(), temp_ptr);
    }
    capture.launch();
    EXPECT_EQ(kept.to(Device::cpu()).to_vector<float>()[7], 3.0f);
  }
  kept = Tensor();  // the graph is gone and its last tensor freed: the block goes back to the shared cache
  // CUDA runs the graph's user-object destructor on a thread of its own, a
  // little later; the allocator takes the pool back at its next allocation.
  bool reused = false;
  std::vector<Tensor> eager;
  for (int round = 0; round < 200 && !reused; ++round) {
    eager.clear();
    for (int i = 0; i < 8 && !reused; ++i) {
      eager.push_back(empty({1024}, TensorOptions(DType::kF32, gpu())));
      reused = eager.back().data_ptr() == temp_ptr;
    }
    if (!reused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reused) << "a destroyed graph's pool should return to the shared cache";
}

TEST(ForeignCaptureTest, AStreamThatIsNotCapturingIsRefused) {
  COPPICE_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  bool ran = false;
  EXPECT_ERROR_NAMING(run_in_foreign_capture(gpu(), stream, [&] { ran = true; }), "is not capturing");
  EXPECT_FALSE(ran);
  cudaStreamDestroy(stream);
  EXPECT_ERROR_NAMING(run_in_foreign_capture(Device::cpu(), stream, [] {}), "the CPU has no graph capture");
}

TEST(ForeignCaptureTest, WorkThatChecksOnTheHostAfterItsKernelsIsRefused) {
  COPPICE_REQUIRE_GPU();
  Tensor logits = zeros({2, 3}, TensorOptions(DType::kF32, gpu()));
  Tensor target = from_vector<int64_t>({0, 2}, {2}).to(gpu());
  (void)cross_entropy(logits, target);  // warm
  synchronize(gpu());
  ForeignCapture capture;
  EXPECT_ERROR_NAMING(run_in_foreign_capture(gpu(), capture.stream(), [&] { (void)cross_entropy(logits, target); }),
                      "cannot do at each replay");
  (void)capture.end();
  // Coppice works eagerly afterwards.
  EXPECT_EQ(sum(full({4}, 1.0, TensorOptions(DType::kF32, gpu()))).item(), 4.0);
}

TEST(ForeignCaptureTest, TrustedIndexingJoinsTheCaptureWhereCheckedIndexingCannot) {
  COPPICE_REQUIRE_GPU();
  Tensor x = from_vector<float>({10, 11, 12, 13}, {4}).to(gpu());
  Tensor index = from_vector<int64_t>({3, 0, 3}, {3}).to(gpu());
  (void)index_select_trusted(x, 0, index);  // warm
  synchronize(gpu());
  Tensor picked, summed;
  ForeignCapture capture;
  run_in_foreign_capture(gpu(), capture.stream(), [&] {
    picked = index_select_trusted(x, 0, index);
    summed = scatter_add_trusted(zeros({4}, TensorOptions(DType::kF32, gpu())), 0, index, picked);
  });
  ASSERT_TRUE(capture.end());
  capture.launch();
  EXPECT_EQ(picked.to(Device::cpu()).to_vector<float>(), (std::vector<float>{13, 10, 13}));
  EXPECT_EQ(summed.to(Device::cpu()).to_vector<float>(), (std::vector<float>{10, 0, 0, 26}));
  ForeignCapture checked;
  EXPECT_ERROR_NAMING(run_in_foreign_capture(gpu(), checked.stream(), [&] { (void)index_select(x, 0, index); }),
                      "cannot do at each replay");
  (void)checked.end();
}

}  // namespace
}  // namespace coppice
