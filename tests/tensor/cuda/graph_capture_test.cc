// capture_work on CUDA (tensor/backend.h, tensor/cuda/graph_capture.h): a
// replay computes what an eager run would from the current inputs, the pool
// keeps a graph's memory to itself, and what cannot be captured is declined
// with a reason instead of recorded wrongly.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using cuda_testing::gpu;

TEST(GraphCaptureTest, CpuDeclines) {
  std::string why;
  EXPECT_EQ(capture_work(
                Device::cpu(), [] {}, &why),
            nullptr);
  EXPECT_NE(why.find("CPU"), std::string::npos) << why;
}

TEST(GraphCaptureTest, ReplayRecomputesFromCurrentInputs) {
  COPPICE_REQUIRE_GPU();
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2}).to(gpu());
  Tensor w = from_vector<float>({1, 0, 0, 2}, {2, 2}).to(gpu());
  Tensor y;
  (void)add(matmul(x, w), 1.0);  // warm: cuBLAS's handle, kernels loaded
  std::string why;
  std::unique_ptr<CapturedWork> g = capture_work(
      gpu(), [&] { y = add(matmul(x, w), 1.0); }, &why);
  ASSERT_NE(g, nullptr) << why;
  g->replay();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{2, 5, 4, 9}));
  x.copy_(from_vector<float>({0, 1, 1, 0}, {2, 2}));  // in place: the address the graph reads
  g->replay();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{1, 3, 2, 1}));
}

TEST(GraphCaptureTest, PoolMemoryIsNotHandedOutWhileTheGraphLives) {
  COPPICE_REQUIRE_GPU();
  Tensor x = full({1024}, 1.0, TensorOptions(DType::kF32, gpu()));
  Tensor kept;
  void* temp_ptr = nullptr;
  std::string why;
  auto g = capture_work(
      gpu(),
      [&] {
        Tensor temp = mul(x, 2.0);  // freed inside the capture: back to the graph's pool only
        temp_ptr = temp.data_ptr();
        kept = add(temp, 1.0);
      },
      &why);
  ASSERT_NE(g, nullptr) << why;
  // Eager tensors of the same size class must not land on the graph's blocks.
  std::vector<Tensor> eager;
  for (int i = 0; i < 4; ++i) {
    eager.push_back(empty({1024}, TensorOptions(DType::kF32, gpu())));
    EXPECT_NE(eager.back().data_ptr(), temp_ptr);
    EXPECT_NE(eager.back().data_ptr(), kept.data_ptr());
  }
  g->replay();
  EXPECT_EQ(kept.to(Device::cpu()).to_vector<float>()[7], 3.0f);
  g.reset();  // the pool's blocks go back to the shared cache
  eager.clear();
  bool reused = false;
  for (int i = 0; i < 64 && !reused; ++i) {
    eager.push_back(empty({1024}, TensorOptions(DType::kF32, gpu())));
    reused = eager.back().data_ptr() == temp_ptr;
  }
  EXPECT_TRUE(reused) << "a released graph's free block should return to the shared cache";
}

TEST(GraphCaptureTest, HostReadBackIsDeclinedAndLeavesNoError) {
  COPPICE_REQUIRE_GPU();
  Tensor x = full({16}, 2.0, TensorOptions(DType::kF32, gpu()));
  std::string why;
  auto g = capture_work(
      gpu(), [&] { (void)sum(x).item(); }, &why);
  EXPECT_EQ(g, nullptr);
  EXPECT_FALSE(why.empty());
  // The device still works eagerly afterwards.
  EXPECT_EQ(sum(x).item(), 32.0);
}

TEST(GraphCaptureTest, RandomDrawsAreDeclined) {
  COPPICE_REQUIRE_GPU();
  std::string why;
  Tensor r;
  auto g = capture_work(
      gpu(), [&] { r = bernoulli({64}, 0.5, TensorOptions(DType::kF32, gpu())); }, &why);
  EXPECT_EQ(g, nullptr);
  EXPECT_NE(why.find("random"), std::string::npos) << why;
}

TEST(GraphCaptureTest, BadIndexReportedAtTheReadAfterTheReplayThatSawIt) {
  COPPICE_REQUIRE_GPU();
  Tensor logits = zeros({2, 3}, TensorOptions(DType::kF32, gpu()));
  Tensor target = from_vector<int64_t>({0, 2}, {2}).to(gpu());
  Tensor loss;
  (void)cross_entropy(logits, target);  // warm
  std::string why;
  auto g = capture_work(
      gpu(), [&] { loss = cross_entropy(logits, target); }, &why);
  ASSERT_NE(g, nullptr) << why;
  g->replay();
  EXPECT_NEAR(loss.item(), std::log(3.0), 1e-6);
  target.copy_(from_vector<int64_t>({0, 7}, {2}));
  g->replay();  // queues the check's read-back behind the graph: the host does not wait
  try {
    (void)loss.item();
    FAIL() << "a target out of range should throw at the read after the replay";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("index 7"), std::string::npos) << e.what(); }
  target.copy_(from_vector<int64_t>({0, 1}, {2}));
  g->replay();
  EXPECT_NEAR(loss.item(), std::log(3.0), 1e-6);  // the failure was reported once
}

TEST(GraphCaptureTest, ExceptionInsideTheCaptureIsDeclined) {
  COPPICE_REQUIRE_GPU();
  std::string why;
  auto g = capture_work(
      gpu(), [] { fail("a shape error in the step"); }, &why);
  EXPECT_EQ(g, nullptr);
  EXPECT_NE(why.find("a shape error in the step"), std::string::npos) << why;
  EXPECT_EQ(sum(full({4}, 1.0, TensorOptions(DType::kF32, gpu()))).item(), 4.0);
}

}  // namespace
}  // namespace coppice
