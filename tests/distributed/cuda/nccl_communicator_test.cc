// Tests for distributed/nccl_communicator.h and distributed/nccl.h.
//
// World-1 tests run every collective on cuda:0 (one GPU is enough).
// Multi-rank tests run one thread per GPU (world = visible GPUs, at most 4;
// they skip with fewer than 2): every collective against a CPU expectation in
// f32, bf16 and i64, average, all_gather_v with unequal sizes, CPU staging,
// several collectives in flight, a peer that never issues a collective (the
// waiting rank must throw within the timeout, and at once afterwards), and
// the full path through make_nccl_communicator with a TCP rendezvous.
#include "distributed/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/nccl.h"
#include "distributed/tcp_rendezvous.h"
#include "gtest/gtest.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the NCCL backend needs a GPU"

#define SKIP_WITHOUT_GPUS(n)              \
  if (coppice::cuda_device_count() < (n)) \
  GTEST_SKIP() << "needs " << (n) << " GPUs (one thread per GPU), " << coppice::cuda_device_count() << " visible"

const DType kReducible[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8};
const DType kMoving[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                         DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
const DType kMultiRank[] = {DType::kF32, DType::kBF16, DType::kI64};

// Rank r's value at flat index i: small integers, exact in every dtype.
double value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11) + (rank == 2 ? 1 : 0); }

std::vector<double> rank_values(int rank, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, i);
  return v;
}

Tensor rank_tensor(int rank, const Shape& shape, DType dtype, Device device) {
  std::vector<double> v = rank_values(rank, shape_numel(shape));
  if (dtype == DType::kBool) {
    for (double& x : v) x = x > 4 ? 1 : 0;
  }
  return from_vector<double>(v, shape).to(TensorOptions(dtype, device));
}

std::vector<double> host_values(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF64).to_vector<double>(); }

::testing::AssertionResult near(const std::vector<double>& got, const std::vector<double>& want, DType dtype) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  const double rtol = dtype == DType::kBF16 || dtype == DType::kF16 ? 1e-2 : 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rtol * (1 + std::abs(want[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << ", expected " << want[i] << " (" << dtype_name(dtype) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// The reduction every rank should see, computed on the host.
std::vector<double> expected_reduce(int world, int64_t n, ReduceOp op) {
  std::vector<double> out = rank_values(0, n);
  for (int r = 1; r < world; ++r) {
    std::vector<double> v = rank_values(r, n);
    for (size_t i = 0; i < out.size(); ++i) out[i] = op == ReduceOp::kMax ? std::max(out[i], v[i]) : out[i] + v[i];
  }
  if (op == ReduceOp::kAverage) {
    for (double& x : out) x /= world;
  }
  return out;
}

int multi_world() { return std::min(cuda_device_count(), 4); }

// `timeout` bounds each collective; init gets a minute (starting NCCL takes a
// while and is not what these tests time).
NcclOptions options_with(milliseconds timeout, milliseconds init_timeout = milliseconds(60000)) {
  NcclOptions o;
  o.timeout = timeout;
  o.init_timeout = init_timeout;
  return o;
}

// Runs fn(r) on `world` threads, one per rank r. An exception on a rank is
// reported as a test failure naming the rank.
void on_rank_threads(int world, const std::function<void(int)>& fn) {
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back(str_cat("rank ", r, ": ", e.what()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) ADD_FAILURE() << e;
}

// Runs fn on `world` threads, rank r on cuda:r, each with its own
// communicator (made from one shared unique id).
void run_ranks(int world, const NcclOptions& options, const std::function<void(NcclCommunicator&)>& fn) {
  const std::string id = nccl_unique_id();
  on_rank_threads(world, [&](int r) {
    (void)zeros({1}, TensorOptions(DType::kF32, Device::cuda(r)));  // the CUDA context, before init
    std::unique_ptr<Communicator> comm = make_nccl_communicator_from_id(id, r, world, r, options);
    auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get());
    ASSERT_NE(nccl, nullptr);
    fn(*nccl);
  });
}

// ---- one rank, cuda:0 ----

class NcclWorld1 : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA();
    comm_ = make_nccl_communicator_from_id(nccl_unique_id(), 0, 1, 0, options_with(milliseconds(60000)));
  }
  std::unique_ptr<Communicator> comm_;
  const Device cuda0_ = Device::cuda(0);
};

TEST_F(NcclWorld1, Basics) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_TRUE(nccl_available());
}

TEST_F(NcclWorld1, AllReduceIsTheIdentity) {
  for (DType dtype : kReducible) {
    for (const Shape& shape : {Shape{0}, Shape{5}, Shape{2, 3}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        if (op == ReduceOp::kAverage && !is_floating(dtype)) continue;
        Tensor t = rank_tensor(0, shape, dtype, cuda0_);
        Work w = comm_->all_reduce(t, op);
        w.wait();
        EXPECT_TRUE(w.is_completed());
        EXPECT_TRUE(w.result().is_same(t));
        EXPECT_TRUE(near(host_values(t), host_values(rank_tensor(0, shape, dtype, Device::cpu())), dtype))
            << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
  }
}

TEST_F(NcclWorld1, DataMovingCollectivesCopy) {
  for (DType dtype : kMoving) {
    for (const Shape& shape : {Shape{0}, Shape{4}, Shape{3, 2}}) {
      const std::vector<double> want = host_values(rank_tensor(0, shape, dtype, Device::cpu()));
      Tensor t = rank_tensor(0, shape, dtype, cuda0_);
      comm_->broadcast(t, 0).wait();
      EXPECT_TRUE(near(host_values(t), want, dtype)) << dtype_name(dtype);

      Work g = comm_->all_gather(t);
      g.wait();
      EXPECT_EQ(g.result().shape(), shape);
      EXPECT_EQ(g.result().dtype(), dtype);
      EXPECT_EQ(g.result().device(), cuda0_);
      EXPECT_TRUE(near(host_values(g.result()), want, dtype)) << dtype_name(dtype);

      Work v = comm_->all_gather_v(t);
      v.wait();
      EXPECT_EQ(v.result().shape(), shape);
      EXPECT_EQ(v.sizes(), std::vector<int64_t>{shape[0]});
      EXPECT_TRUE(near(host_values(v.result()), want, dtype)) << dtype_name(dtype);
    }
  }
}

TEST_F(NcclWorld1, ReduceScatterIsTheIdentity) {
  for (DType dtype : kReducible) {
    Tensor t = rank_tensor(0, {4, 3}, dtype, cuda0_);
    Work w = comm_->reduce_scatter(t, ReduceOp::kSum);
    w.wait();
    EXPECT_EQ(w.result().shape(), (Shape{4, 3}));
    EXPECT_TRUE(near(host_values(w.result()), host_values(t), dtype)) << dtype_name(dtype);
  }
}

TEST_F(NcclWorld1, NonContiguousInputsOfOutOfPlaceCollectives) {
  Tensor t = rank_tensor(0, {3, 4}, DType::kF32, cuda0_).t();  // [4, 3], transposed strides
  Work w = comm_->all_gather(t);
  w.wait();
  EXPECT_TRUE(near(host_values(w.result()), host_values(t.contiguous()), DType::kF32));
}

TEST_F(NcclWorld1, BarrierCompletes) {
  Work w = comm_->barrier();
  w.wait();
  EXPECT_TRUE(w.is_completed());
}

TEST_F(NcclWorld1, CpuTensorsAreStaged) {
  Tensor t = rank_tensor(0, {2, 3}, DType::kF32, Device::cpu());
  const std::vector<double> want = host_values(t);
  Work w = comm_->all_reduce(t, ReduceOp::kSum);
  w.wait();
  EXPECT_TRUE(w.result().is_same(t));
  EXPECT_TRUE(near(host_values(t), want, DType::kF32));

  Work g = comm_->all_gather(t);
  g.wait();
  EXPECT_TRUE(g.result().device().is_cpu());
  EXPECT_TRUE(near(host_values(g.result()), want, DType::kF32));

  Work v = comm_->all_gather_v(t);
  v.wait();
  EXPECT_TRUE(v.result().device().is_cpu());
  EXPECT_EQ(v.sizes(), std::vector<int64_t>{2});
}

TEST_F(NcclWorld1, ResultBeforeWaitThrows) {
  Tensor t = rank_tensor(0, {4}, DType::kF32, cuda0_);
  Work w = comm_->all_gather(t);
  EXPECT_ERROR_NAMING(w.result(), "before wait() returned");
  w.wait();
  w.wait();  // again: returns at once
  EXPECT_EQ(w.result().shape(), (Shape{4}));
}

TEST_F(NcclWorld1, MisuseIsRefusedWithTheSharedMessages) {
  Tensor b = zeros({4}, TensorOptions(DType::kBool, cuda0_));
  EXPECT_ERROR_NAMING(comm_->all_reduce(b), "bool tensors cannot be reduced");
  Tensor i = zeros({4}, TensorOptions(DType::kI32, cuda0_));
  EXPECT_ERROR_NAMING(comm_->all_reduce(i, ReduceOp::kAverage), "needs a floating dtype");
  EXPECT_ERROR_NAMING(comm_->broadcast(i, 1), "root 1 is not a rank");
  Tensor s = zeros({}, TensorOptions(DType::kF32, cuda0_));
  EXPECT_ERROR_NAMING(comm_->all_gather(s), "at least 1 dim");
  Tensor nc = zeros({3, 4}, TensorOptions(DType::kF32, cuda0_)).t();
  EXPECT_ERROR_NAMING(comm_->all_reduce(nc), "needs a contiguous tensor");
  // A refused call does not break the communicator.
  Tensor ok = zeros({2}, TensorOptions(DType::kF32, cuda0_));
  comm_->all_reduce(ok).wait();
}

TEST_F(NcclWorld1, TensorOnAnotherGpuIsRefused) {
  SKIP_WITHOUT_GPUS(2);
  Tensor t = zeros({4}, TensorOptions(DType::kF32, Device::cuda(1)));
  EXPECT_ERROR_NAMING(comm_->all_reduce(t), "the tensor is on cuda:1");
}

TEST_F(NcclWorld1, AbortMakesLaterCallsThrow) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm_.get());
  ASSERT_NE(nccl, nullptr);
  EXPECT_FALSE(nccl->aborted());
  nccl->abort("nccl: the job failed elsewhere");
  EXPECT_TRUE(nccl->aborted());
  Tensor t = zeros({2}, TensorOptions(DType::kF32, cuda0_));
  EXPECT_ERROR_NAMING(comm_->all_reduce(t), "the job failed elsewhere");
  EXPECT_ERROR_NAMING(comm_->barrier(), "the job failed elsewhere");
}

// No GPU needed: rank 1 fails in the rendezvous, before touching NCCL.
TEST(NcclFactories, RendezvousTimeoutNamesTheAddress) {
  absl::StatusOr<int> port = pick_free_tcp_port();
  ASSERT_TRUE(port.ok()) << port.status().message();
  LaunchEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = *port;
  env.job_token = "nccl-test-token-0123456789";
  EXPECT_ERROR_NAMING(make_nccl_communicator(env, 0, options_with(milliseconds(60000), milliseconds(500))),
                      "nccl: rendezvous: rank 1 could not reach 127.0.0.1:" + std::to_string(*port) + " within 0.5 s");
}

TEST(NcclFactories, WorldOfOneFromTheLaunchEnvironment) {
  SKIP_WITHOUT_CUDA();
  LaunchEnv env;  // rank 0 of 1, no address needed
  std::unique_ptr<Communicator> comm = make_nccl_communicator(env, 0);
  Tensor t = rank_tensor(0, {3}, DType::kF32, Device::cuda(0));
  comm->all_reduce(t).wait();
  EXPECT_TRUE(near(host_values(t), rank_values(0, 3), DType::kF32));
}

TEST(NcclFactories, BadArguments) {
  SKIP_WITHOUT_CUDA();
  EXPECT_ERROR_NAMING(make_nccl_communicator_from_id("short", 0, 1, 0), "unique id has 128 bytes");
  EXPECT_ERROR_NAMING(make_nccl_communicator_from_id(nccl_unique_id(), 2, 2, 0), "is not a rank");
  EXPECT_ERROR_NAMING(make_nccl_communicator_from_id(nccl_unique_id(), 0, 1, 99), "cuda:99 does not exist");
}

TEST(NcclFactories, NvlsIsOffUnlessSet) {
  SKIP_WITHOUT_CUDA();
  (void)nccl_unique_id();
  const char* v = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(v, nullptr);
  // Connections are made at the bounded init, not at a blocking launch.
  const char* connect = std::getenv("NCCL_RUNTIME_CONNECT");
  ASSERT_NE(connect, nullptr);
}

// Rank 0 of a world of 2 whose rank 1 never starts: init must give up.
TEST(NcclFaults, InitTimesOutWhenAPeerNeverJoins) {
  SKIP_WITHOUT_CUDA();
  const Clock::time_point start = Clock::now();
  EXPECT_ERROR_NAMING(
      make_nccl_communicator_from_id(nccl_unique_id(), 0, 2, 0, options_with(milliseconds(60000), milliseconds(2000))),
      "did not complete within 2 s");
  EXPECT_LT(Clock::now() - start, milliseconds(10000));
}

// ---- several ranks, one thread per GPU ----

TEST(NcclMultiRank, AllReduce) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    for (DType dtype : kMultiRank) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        if (op == ReduceOp::kAverage && !is_floating(dtype)) continue;
        for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{0}}) {
          Tensor t = rank_tensor(comm.rank(), shape, dtype, dev);
          comm.all_reduce(t, op).wait();
          EXPECT_TRUE(near(host_values(t), expected_reduce(world, shape_numel(shape), op), dtype))
              << "rank " << comm.rank() << " " << dtype_name(dtype) << " " << reduce_op_name(op);
        }
      }
    }
  });
}

TEST(NcclMultiRank, Broadcast) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    for (DType dtype : kMultiRank) {
      for (int root = 0; root < world; ++root) {
        Tensor t = rank_tensor(comm.rank(), {2, 4}, dtype, dev);
        comm.broadcast(t, root).wait();
        EXPECT_TRUE(near(host_values(t), rank_values(root, 8), dtype)) << "root " << root;
      }
    }
  });
}

TEST(NcclMultiRank, AllGatherAndReduceScatter) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    for (DType dtype : kMultiRank) {
      Tensor in = rank_tensor(comm.rank(), {2, 3}, dtype, dev);
      Work g = comm.all_gather(in);
      g.wait();
      EXPECT_EQ(g.result().shape(), (Shape{2 * world, 3}));
      std::vector<double> want;
      for (int r = 0; r < world; ++r) {
        std::vector<double> v = rank_values(r, 6);
        want.insert(want.end(), v.begin(), v.end());
      }
      EXPECT_TRUE(near(host_values(g.result()), want, dtype)) << dtype_name(dtype);

      const int64_t rows = 2 * world;
      Tensor big = rank_tensor(comm.rank(), {rows, 3}, dtype, dev);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        Work s = comm.reduce_scatter(big, op);
        s.wait();
        EXPECT_EQ(s.result().shape(), (Shape{2, 3}));
        const std::vector<double> all = expected_reduce(world, rows * 3, op);
        const std::vector<double> mine(all.begin() + comm.rank() * 6, all.begin() + comm.rank() * 6 + 6);
        EXPECT_TRUE(near(host_values(s.result()), mine, dtype)) << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
  });
}

TEST(NcclMultiRank, AllGatherVWithUnequalSizes) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  // Rank r contributes r rows (rank 0 none), plus 2 for the last rank.
  auto rows_of = [world](int r) -> int64_t { return r + (r == world - 1 ? 2 : 0); };
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    for (DType dtype : kMultiRank) {
      Tensor in = rank_tensor(comm.rank(), {rows_of(comm.rank()), 2}, dtype, dev);
      Work v = comm.all_gather_v(in);
      v.wait();
      std::vector<int64_t> want_sizes;
      std::vector<double> want;
      for (int r = 0; r < world; ++r) {
        want_sizes.push_back(rows_of(r));
        std::vector<double> x = rank_values(r, rows_of(r) * 2);
        want.insert(want.end(), x.begin(), x.end());
      }
      EXPECT_EQ(v.sizes(), want_sizes);
      EXPECT_EQ(v.result().size(0), static_cast<int64_t>(want.size() / 2));
      EXPECT_TRUE(near(host_values(v.result()), want, dtype)) << dtype_name(dtype);
    }
  });
}

TEST(NcclMultiRank, CpuTensorsAreStaged) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    Tensor loss = from_vector<double>({static_cast<double>(comm.rank() + 1)}, {1}).to(DType::kF32);
    Work w = comm.all_reduce(loss, ReduceOp::kAverage);
    w.wait();
    EXPECT_TRUE(loss.device().is_cpu());
    EXPECT_NEAR(loss.item(), (world + 1) / 2.0, 1e-6);

    Tensor count = from_vector<int64_t>({comm.rank() * 10}, {1});
    Work g = comm.all_gather_v(count);
    g.wait();
    EXPECT_TRUE(g.result().device().is_cpu());
    std::vector<double> want;
    for (int r = 0; r < world; ++r) want.push_back(r * 10);
    EXPECT_TRUE(near(host_values(g.result()), want, DType::kI64));
  });
}

TEST(NcclMultiRank, SeveralCollectivesInFlight) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int k = 0; k < 6; ++k) {
      const DType dtype = kMultiRank[k % 3];
      ts.push_back(rank_tensor(comm.rank(), {1000 + k}, dtype, dev));
      works.push_back(comm.all_reduce(ts.back(), ReduceOp::kSum));
    }
    Tensor gather_in = rank_tensor(comm.rank(), {3}, DType::kF32, dev);
    Work g = comm.all_gather(gather_in);
    // The same tensor twice: the second all_reduce sees the first's result.
    Tensor twice = full({4}, 1.0, TensorOptions(DType::kF32, dev));
    Work a = comm.all_reduce(twice);
    Work b = comm.all_reduce(twice);
    Work bar = comm.barrier();
    // Waited in reverse order.
    bar.wait();
    b.wait();
    a.wait();
    g.wait();
    for (int k = 5; k >= 0; --k) {
      works[k].wait();
      EXPECT_TRUE(works[k].is_completed());
      EXPECT_TRUE(near(host_values(ts[k]), expected_reduce(world, 1000 + k, ReduceOp::kSum), kMultiRank[k % 3]))
          << "collective " << k;
    }
    EXPECT_TRUE(near(host_values(twice), std::vector<double>(4, world * world), DType::kF32));
    EXPECT_EQ(g.result().numel(), 3 * world);
  });
}

// Collectives are enqueued by the communicator's launcher thread; Works
// dropped at once, before it has launched them, still run in issue order and
// keep their buffers until the default stream has waited for them.
TEST(NcclMultiRank, WorksDroppedBeforeTheirLaunch) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    Tensor acc = full({1024}, 1.0, TensorOptions(DType::kF32, dev));
    for (int k = 0; k < 40; ++k) {
      comm.all_reduce(acc, ReduceOp::kAverage);  // dropped: average of equal values is the same
      Tensor scratch = full({4096}, static_cast<double>(k), TensorOptions(DType::kF32, dev));
      comm.all_reduce(scratch);  // dropped with its only reference to the buffer
    }
    Tensor last = rank_tensor(comm.rank(), {7}, DType::kF32, dev);
    comm.all_reduce(last, ReduceOp::kSum).wait();
    EXPECT_TRUE(near(host_values(last), expected_reduce(world, 7, ReduceOp::kSum), DType::kF32));
    EXPECT_TRUE(near(host_values(acc), std::vector<double>(1024, 1.0), DType::kF32));
  });
}

TEST(NcclMultiRank, DefaultStreamWorkAfterWaitSeesTheResult) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  run_ranks(world, options_with(milliseconds(60000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    Tensor t = full({1 << 20}, 1.0, TensorOptions(DType::kF32, dev));
    comm.all_reduce(t).wait();
    Tensor doubled = add(t, t);  // default-stream kernel right after wait()
    EXPECT_NEAR(sum(doubled).item(), 2.0 * world * (1 << 20), 1.0);
  });
}

// Rank 1 never issues the all_reduce rank 0 waits for: rank 0 must throw
// within the timeout, and every later call at once.
TEST(NcclFaults, PeerThatNeverIssuesTheCollective) {
  SKIP_WITHOUT_GPUS(2);
  std::atomic<bool> rank0_done{false};
  run_ranks(2, options_with(milliseconds(2000)), [&](NcclCommunicator& comm) {
    const Device dev = Device::cuda(comm.device());
    Tensor t = full({256}, 1.0, TensorOptions(DType::kF32, dev));
    comm.all_reduce(t).wait();  // both ranks: NCCL has connected, the fault is in the next one
    if (comm.rank() == 0) {
      const Clock::time_point start = Clock::now();
      EXPECT_TRUE(coppice::testing::throws_with(
          [&] { comm.all_reduce(t).wait(); },
          {"nccl: all_reduce #1 did not complete within 2 s on rank 0", "the communicator was aborted"}));
      const auto took = Clock::now() - start;
      EXPECT_GE(took, milliseconds(1500));
      EXPECT_LT(took, milliseconds(10000));
      EXPECT_TRUE(comm.aborted());
      const Clock::time_point again = Clock::now();
      EXPECT_ERROR_NAMING(comm.all_reduce(t), "did not complete within");
      EXPECT_ERROR_NAMING(comm.barrier(), "did not complete within");
      EXPECT_LT(Clock::now() - again, milliseconds(1000));
      rank0_done = true;
    } else {
      const Clock::time_point start = Clock::now();
      while (!rank0_done && Clock::now() - start < std::chrono::seconds(30)) {
        std::this_thread::sleep_for(milliseconds(10));
      }
      EXPECT_TRUE(rank0_done.load());
    }
    // Leaving destroys the communicator: bounded by the timeout on both ranks.
  });
}

TEST(NcclFactories, RendezvousOverTcp) {
  SKIP_WITHOUT_GPUS(2);
  const int world = multi_world();
  absl::StatusOr<int> port = pick_free_tcp_port();
  ASSERT_TRUE(port.ok()) << port.status().message();
  on_rank_threads(world, [&](int r) {
    LaunchEnv env;
    env.rank = r;
    env.world_size = world;
    env.local_rank = r;
    env.local_world_size = world;
    env.master_addr = "127.0.0.1";
    env.master_port = *port;
    env.job_token = "nccl-test-token-0123456789";
    env.launcher = Launcher::kEnv;
    std::unique_ptr<Communicator> comm = make_nccl_communicator(env, r, options_with(milliseconds(60000)));
    EXPECT_EQ(comm->rank(), r);
    EXPECT_EQ(comm->world_size(), world);
    Tensor t = rank_tensor(r, {5}, DType::kF32, Device::cuda(r));
    comm->all_reduce(t).wait();
    EXPECT_TRUE(near(host_values(t), expected_reduce(world, 5, ReduceOp::kSum), DType::kF32)) << "rank " << r;
  });
}

}  // namespace
}  // namespace coppice
