// SideBranch (tensor/cuda/side_stream.h): work on the side stream starts
// after what the main stream queued before the fork, the main stream's later
// work waits for it (joined explicitly or by the destructor), the pair is
// recorded into a CUDA graph as its edges, and a device it cannot serve is
// refused naming the op; run_beside, which runs a function's work there.
#include "tensor/cuda/side_stream.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"
#include "tests/tensor/cuda/cuda_test_util.h"

namespace coppice {
namespace {

using cuda_testing::gpu;

// 256 MB: large enough that a copy started too early would read the bytes
// before the memset before it finished, and one read too early, stale ones.
constexpr size_t kBytes = size_t{256} << 20;

struct DeviceBuffers {
  DeviceBuffers() {
    EXPECT_EQ(cudaMalloc(&x, kBytes), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&y, kBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(x, 0, kBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(y, 0, kBytes), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DeviceBuffers() {
    cudaFree(x);
    cudaFree(y);
  }
  // Every byte of y, copied to the host on the main stream (ordered after the join).
  std::vector<uint8_t> y_on_host(cudaStream_t main) const {
    std::vector<uint8_t> h(kBytes);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), y, kBytes, cudaMemcpyDeviceToHost, main), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(main), cudaSuccess);
    return h;
  }
  void* x = nullptr;
  void* y = nullptr;
};

bool all_equal(const std::vector<uint8_t>& v, uint8_t want) {
  for (uint8_t b : v) {
    if (b != want) return false;
  }
  return true;
}

TEST(SideStreamTest, ForkAndJoinOrderTheSideStreamsWork) {
  COPPICE_REQUIRE_GPU();
  DeviceBuffers b;
  cudaStream_t main = cuda::current_stream(0);
  for (int round = 1; round <= 3; ++round) {
    ASSERT_EQ(cudaMemsetAsync(b.x, round, kBytes, main), cudaSuccess);
    cuda::SideBranch side(0, main, "side_stream_test");
    ASSERT_EQ(cudaMemcpyAsync(b.y, b.x, kBytes, cudaMemcpyDeviceToDevice, side.stream()), cudaSuccess);
    side.join();
    EXPECT_TRUE(all_equal(b.y_on_host(main), static_cast<uint8_t>(round))) << "round " << round;
  }
}

TEST(SideStreamTest, TheDestructorJoins) {
  COPPICE_REQUIRE_GPU();
  DeviceBuffers b;
  cudaStream_t main = cuda::current_stream(0);
  ASSERT_EQ(cudaMemsetAsync(b.x, 7, kBytes, main), cudaSuccess);
  {
    cuda::SideBranch side(0, main, "side_stream_test");
    ASSERT_EQ(cudaMemcpyAsync(b.y, b.x, kBytes, cudaMemcpyDeviceToDevice, side.stream()), cudaSuccess);
  }
  EXPECT_TRUE(all_equal(b.y_on_host(main), 7));
}

TEST(SideStreamTest, ACapturedBranchReplaysFromCurrentInputs) {
  COPPICE_REQUIRE_GPU();
  Tensor x = from_vector<float>({1, 2, 3, 4}, {4}).to(gpu());
  Tensor y = zeros({4}, TensorOptions(DType::kF32, gpu()));
  { cuda::SideBranch warm(0, cuda::current_stream(0), "side_stream_test"); }  // the stream and events exist
  std::string why;
  auto g = capture_work(
      gpu(),
      [&] {
        cudaStream_t main = cuda::current_stream(0);
        cuda::SideBranch side(0, main, "side_stream_test");
        cudaMemcpyAsync(y.data_ptr(), x.data_ptr(), 4 * sizeof(float), cudaMemcpyDeviceToDevice, side.stream());
        side.join();
      },
      &why);
  ASSERT_NE(g, nullptr) << why;
  g->replay();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  x.copy_(from_vector<float>({5, 6, 7, 8}, {4}));
  g->replay();
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
}

// run_beside (tensor/backend.h): the second function's work goes to the
// side stream and the first's to the main one, and work queued after the
// join (join_beside) follows both.
TEST(RunBesideTest, TheSecondsWorkRunsOnTheSideStreamAndWorkAfterTheJoinFollowsBoth) {
  COPPICE_REQUIRE_GPU();
  DeviceBuffers b;
  const cudaStream_t main = cuda::current_stream(0);
  for (int round = 1; round <= 3; ++round) {
    ASSERT_EQ(cudaMemsetAsync(b.x, round, kBytes, main), cudaSuccess);
    cudaStream_t first_stream = main, second_stream = main;
    run_beside(
        gpu(), [&] { first_stream = cuda::current_stream(0); },
        [&] {
          second_stream = cuda::current_stream(0);
          // x's memset was queued before the fork: the side stream's copy follows it.
          ASSERT_EQ(cudaMemcpyAsync(b.y, b.x, kBytes, cudaMemcpyDeviceToDevice, second_stream), cudaSuccess);
        });
    EXPECT_EQ(first_stream, main);
    EXPECT_NE(second_stream, main);
    EXPECT_EQ(cuda::current_stream(0), main) << "the main stream is current again after the call";
    join_beside(gpu());
    EXPECT_TRUE(all_equal(b.y_on_host(main), static_cast<uint8_t>(round))) << "round " << round;
  }
}

// The side stream's branch stays open after the call and beside the next
// one: the call after that, a synchronize and a copy to the host each join
// it first, so what they or the work after them read is complete.
TEST(RunBesideTest, TheCallAfterNextASynchronizeAndACopyJoinTheSideStream) {
  COPPICE_REQUIRE_GPU();
  DeviceBuffers b;
  const cudaStream_t main = cuda::current_stream(0);
  auto copy_x_to_y_beside = [&](uint8_t value) {
    ASSERT_EQ(cudaMemsetAsync(b.x, value, kBytes, main), cudaSuccess);
    run_beside(
        gpu(), [] {},
        [&] {
          ASSERT_EQ(cudaMemcpyAsync(b.y, b.x, kBytes, cudaMemcpyDeviceToDevice, cuda::current_stream(0)), cudaSuccess);
        });
  };
  copy_x_to_y_beside(1);
  run_beside(
      gpu(), [] {}, [] {});  // the copy's branch stays open beside this one
  run_beside(
      gpu(), [] {}, [] {});  // joins the copy's branch before its own fork
  EXPECT_TRUE(all_equal(b.y_on_host(main), 1)) << "after two more run_beside calls";
  copy_x_to_y_beside(2);
  synchronize(gpu());
  EXPECT_TRUE(all_equal(b.y_on_host(main), 2)) << "after a synchronize";
  copy_x_to_y_beside(3);
  Tensor one = Tensor::empty({1}, TensorOptions(DType::kF32, gpu()));
  (void)one.to(Device::cpu());  // a copy to the host joins first
  EXPECT_TRUE(all_equal(b.y_on_host(main), 3)) << "after a copy to the host";
}

// A call from inside run_beside's own functions is refused, naming it.
TEST(RunBesideTest, ANestedCallIsRefused) {
  COPPICE_REQUIRE_GPU();
  EXPECT_TRUE(testing::throws_with(
      [] {
        run_beside(
            gpu(),
            [] {
              run_beside(
                  gpu(), [] {}, [] {});
            },
            [] {});
      },
      {"run_beside", "do not nest"}));
  run_beside(
      gpu(), [] {}, [] {});  // and the device takes the next call
  join_beside(gpu());
}

// A block freed on the host inside the call is not handed to the other
// function's work, which may still run beside the work that used it, nor
// to work queued before the join; after the join it is reused as before.
TEST(RunBesideTest, BlocksFreedInsideAreNotReusedUntilTheJoin) {
  COPPICE_REQUIRE_GPU();
  const TensorOptions f32(DType::kF32, gpu());
  { Tensor warm = Tensor::empty({1 << 20}, f32); }  // a cached 4 MB block
  const void* freed = nullptr;
  const void* reused = nullptr;
  run_beside(
      gpu(),
      [&] {
        Tensor t = Tensor::empty({1 << 20}, f32);
        freed = t.data_ptr();
      },
      [&] {
        Tensor u = Tensor::empty({1 << 20}, f32);
        reused = u.data_ptr();
      });
  EXPECT_NE(freed, reused) << "the second function was given the block the first one freed";
  Tensor before_join = Tensor::empty({1 << 20}, f32);
  EXPECT_TRUE(before_join.data_ptr() != freed && before_join.data_ptr() != reused)
      << "a block was reused before the join";
  join_beside(gpu());
  Tensor after = Tensor::empty({1 << 20}, f32);
  EXPECT_TRUE(after.data_ptr() == freed || after.data_ptr() == reused) << "the held blocks return to the cache";
}

// A block freed inside one call stays held through the next call, whose
// work may run beside the first's, and returns once a third call joins the
// first's branch.
TEST(RunBesideTest, ABranchsFreesAreHeldUntilItIsJoined) {
  COPPICE_REQUIRE_GPU();
  const TensorOptions f32(DType::kF32, gpu());
  join_beside(gpu());
  const int64_t n = int64_t{41} << 18;  // 41 MB, a size class of its own here
  { Tensor warm = Tensor::empty({n}, f32); }
  const void* freed = nullptr;
  run_beside(
      gpu(), [] {},
      [&] {
        Tensor t = Tensor::empty({n}, f32);
        freed = t.data_ptr();
      });
  const void* in_next = nullptr;
  run_beside(
      gpu(),
      [&] {
        Tensor u = Tensor::empty({n}, f32);
        in_next = u.data_ptr();
      },
      [] {});
  EXPECT_NE(in_next, freed) << "the next call was given a block the open branch freed";
  run_beside(
      gpu(), [] {}, [] {});  // joins the first branch
  Tensor after = Tensor::empty({n}, f32);
  EXPECT_TRUE(after.data_ptr() == freed) << "the first branch's block returns to the cache once it is joined";
  join_beside(gpu());
}

// Both functions' kernels recorded into a CUDA graph, the capture ending
// with the side stream's branch open (the capture joins it): each replay
// computes both from the inputs of that replay.
TEST(RunBesideTest, ACapturedPairReplaysFromCurrentInputs) {
  COPPICE_REQUIRE_GPU();
  Tensor x = from_vector<float>({1, 2, 3, 4}, {4}).to(gpu());
  Tensor doubled, plus_one;
  run_beside(
      gpu(), [&] { doubled = mul(x, 2.0); }, [&] { plus_one = add(x, 1.0); });  // warm
  std::string why;
  auto g = capture_work(
      gpu(),
      [&] {
        run_beside(
            gpu(), [&] { doubled = mul(x, 2.0); }, [&] { plus_one = add(x, 1.0); });
      },
      &why);
  ASSERT_NE(g, nullptr) << why;
  x.copy_(from_vector<float>({5, 6, 7, 8}, {4}));
  g->replay();
  EXPECT_EQ(doubled.to(Device::cpu()).to_vector<float>(), (std::vector<float>{10, 12, 14, 16}));
  EXPECT_EQ(plus_one.to(Device::cpu()).to_vector<float>(), (std::vector<float>{6, 7, 8, 9}));
}

TEST(SideStreamTest, ADeviceOutOfRangeIsRefusedNamingTheOp) {
  COPPICE_REQUIRE_GPU();
  EXPECT_TRUE(testing::throws_with([] { cuda::SideBranch side(64, nullptr, "my_op"); },
                                   {"my_op", "device index out of range"}));
}

}  // namespace
}  // namespace coppice
