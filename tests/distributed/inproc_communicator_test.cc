// Tests for distributed/inproc_communicator.h: every collective on 1, 2 and 4
// ranks over several dtypes and shapes (empty ones and varying sizes
// included), collectives in flight together, mismatched calls, ranks that
// throw, hang or end early, and bit-identical reductions.
#include "distributed/inproc_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const DType kReducible[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8};
const DType kFloating[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
const Shape kShapes[] = {{0}, {5}, {2, 3}, {4, 0, 2}};

// Rank r's value at flat index i: small integers, exact in every dtype (u8 included).
double value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11) + (rank == 2 ? 1 : 0); }

Tensor rank_tensor(int rank, const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(rank, static_cast<int64_t>(i));
  return from_vector<double>(v, shape).to(dtype);
}

class InprocTest : public ::testing::TestWithParam<int> {
 protected:
  int world() const { return GetParam(); }
};

TEST_P(InprocTest, AllReduce) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    EXPECT_EQ(comm.world_size(), n);
    EXPECT_EQ(comm.backend(), "inproc");
    for (DType dtype : kReducible) {
      for (const Shape& shape : kShapes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
          if (op == ReduceOp::kAverage && !is_floating(dtype)) continue;
          Tensor t = rank_tensor(comm.rank(), shape, dtype);
          Work w = comm.all_reduce(t, op);
          w.wait();
          EXPECT_TRUE(w.is_completed());
          EXPECT_TRUE(w.result().is_same(t));
          std::vector<double> got = t.to_vector<double>();
          ASSERT_EQ(static_cast<int64_t>(got.size()), shape_numel(shape));
          for (size_t i = 0; i < got.size(); ++i) {
            double sum = 0, mx = value(0, static_cast<int64_t>(i));
            for (int r = 0; r < n; ++r) {
              sum += value(r, static_cast<int64_t>(i));
              mx = std::max(mx, value(r, static_cast<int64_t>(i)));
            }
            double want = op == ReduceOp::kSum ? sum : op == ReduceOp::kMax ? mx : sum / n;
            double tol = op == ReduceOp::kAverage && dtype == DType::kBF16 ? 0.05 : 1e-3;
            EXPECT_NEAR(got[i], want, tol) << dtype_name(dtype) << " " << reduce_op_name(op) << " " << i;
          }
        }
      }
    }
  });
}

TEST_P(InprocTest, Broadcast) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    for (int root = 0; root < n; ++root) {
      for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64, DType::kBool}) {
        for (const Shape& shape : kShapes) {
          Tensor t = rank_tensor(comm.rank(), shape, dtype);
          comm.broadcast(t, root).wait();
          std::vector<double> want = rank_tensor(root, shape, dtype).to_vector<double>();
          EXPECT_EQ(t.to_vector<double>(), want) << "root " << root << " " << dtype_name(dtype);
        }
      }
    }
  });
}

TEST_P(InprocTest, AllGather) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    for (DType dtype : {DType::kF64, DType::kF16, DType::kI32, DType::kU8, DType::kBool}) {
      for (const Shape& shape : {Shape{0}, Shape{3}, Shape{2, 3}, Shape{0, 4}}) {
        Work w = comm.all_gather(rank_tensor(comm.rank(), shape, dtype));
        w.wait();
        Shape want_shape = shape;
        want_shape[0] *= n;
        EXPECT_EQ(w.result().shape(), want_shape);
        EXPECT_EQ(w.result().dtype(), dtype);
        EXPECT_TRUE(w.sizes().empty());
        std::vector<double> want;
        for (int r = 0; r < n; ++r) {
          std::vector<double> part = rank_tensor(r, shape, dtype).to_vector<double>();
          want.insert(want.end(), part.begin(), part.end());
        }
        EXPECT_EQ(w.result().to_vector<double>(), want);
      }
    }
    // A strided input is gathered by value.
    Tensor x = rank_tensor(comm.rank(), {3, 2}, DType::kF32).t();
    Work w = comm.all_gather(x);
    w.wait();
    EXPECT_EQ(w.result().narrow(0, 2 * comm.rank(), 2).to_vector<double>(), x.to_vector<double>());
  });
}

TEST_P(InprocTest, AllGatherVaryingSizes) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    for (DType dtype : {DType::kF32, DType::kI64, DType::kBF16}) {
      // Rank r sends (r * 2) % 3 rows of 3: some ranks send none.
      auto rows = [](int r) { return static_cast<int64_t>((r * 2) % 3); };
      Work w = comm.all_gather_v(rank_tensor(comm.rank(), {rows(comm.rank()), 3}, dtype));
      w.wait();
      std::vector<int64_t> want_sizes;
      std::vector<double> want;
      for (int r = 0; r < n; ++r) {
        want_sizes.push_back(rows(r));
        std::vector<double> part = rank_tensor(r, {rows(r), 3}, dtype).to_vector<double>();
        want.insert(want.end(), part.begin(), part.end());
      }
      EXPECT_EQ(w.sizes(), want_sizes);
      EXPECT_EQ(w.result().size(1), 3);
      EXPECT_EQ(w.result().to_vector<double>(), want);
    }
    // Every rank empty.
    Work w = comm.all_gather_v(zeros({0}));
    w.wait();
    EXPECT_EQ(w.result().shape(), Shape{0});
    EXPECT_EQ(w.sizes(), std::vector<int64_t>(n, 0));
  });
}

TEST_P(InprocTest, ReduceScatter) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    for (DType dtype : kReducible) {
      for (int64_t rows : {0, 2}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          Shape shape = {rows * n, 3};
          Tensor x = rank_tensor(comm.rank(), shape, dtype);
          Work w = comm.reduce_scatter(x, op);
          w.wait();
          ASSERT_EQ(w.result().shape(), (Shape{rows, 3}));
          std::vector<double> got = w.result().to_vector<double>();
          for (int64_t i = 0; i < rows * 3; ++i) {
            int64_t flat = comm.rank() * rows * 3 + i;
            double want = op == ReduceOp::kSum ? 0 : value(0, flat);
            for (int r = 0; r < n; ++r) {
              want = op == ReduceOp::kSum ? want + value(r, flat) : std::max(want, value(r, flat));
            }
            EXPECT_EQ(got[static_cast<size_t>(i)], want) << dtype_name(dtype) << " " << i;
          }
        }
      }
    }
  });
}

TEST_P(InprocTest, Barrier) {
  const int n = world();
  std::atomic<int> before{0};
  run_inproc(n, [&](Communicator& comm) {
    if (comm.rank() == n - 1) std::this_thread::sleep_for(milliseconds(20));
    before.fetch_add(1);
    Work w = comm.barrier();
    w.wait();
    EXPECT_EQ(before.load(), n);  // nobody leaves before everyone arrived
    EXPECT_FALSE(w.result().defined());
  });
}

// Two collectives in flight, waited in reverse order; and two on one tensor
// without a wait in between, which see each other in issue order.
TEST_P(InprocTest, AsyncOverlap) {
  const int n = world();
  run_inproc(n, [&](Communicator& comm) {
    Tensor a = full({4}, comm.rank() + 1.0);
    Tensor b = full({2, 2}, static_cast<double>(comm.rank()), DType::kI64);
    Work wa = comm.all_reduce(a);
    Work wb = comm.all_gather(b);
    Work wc = comm.barrier();
    wc.wait();
    wb.wait();
    wa.wait();
    EXPECT_TRUE(wa.is_completed());
    EXPECT_EQ(a.to_vector<double>(), std::vector<double>(4, n * (n + 1) / 2.0));
    EXPECT_EQ(wb.result().shape(), (Shape{2 * n, 2}));

    Tensor t = full({3}, 1.0);
    Work w1 = comm.all_reduce(t);
    Work w2 = comm.all_reduce(t);
    w2.wait();
    w1.wait();
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(3, static_cast<double>(n * n)));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, InprocTest, ::testing::Values(1, 2, 4), [](const ::testing::TestParamInfo<int>& info) {
  return "ranks" + std::to_string(info.param);
});

// Driven from one thread: rank 0 issues, rank 1 has not yet.
TEST(InprocCommunicatorTest, WorkCompletesWhenTheLastRankArrives) {
  auto rendezvous = make_inproc_rendezvous(2);
  InprocCommunicator c0(rendezvous, 0), c1(rendezvous, 1);
  Work w0 = c0.all_gather(full({1}, 5.0));
  EXPECT_FALSE(w0.is_completed());
  EXPECT_ERROR_NAMING(w0.result(), "all_gather #0: result() before wait() returned");
  Work w1 = c1.all_gather(full({1}, 6.0));
  EXPECT_TRUE(w0.is_completed());
  w0.wait();
  w0.wait();  // again: returns at once
  w1.wait();
  EXPECT_EQ(w0.result().to_vector<double>(), (std::vector<double>{5, 6}));
  // Each rank owns its result.
  EXPECT_NE(w0.result().data_ptr(), w1.result().data_ptr());
}

TEST(InprocCommunicatorTest, LocalErrors) {
  InprocCommunicator comm(make_inproc_rendezvous(2), 1);
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_ERROR_NAMING(comm.all_reduce(zeros({2, 3}).t()), "all_reduce: works in place and needs a contiguous");
  EXPECT_ERROR_NAMING(comm.all_reduce(zeros({2}, DType::kI64), ReduceOp::kAverage), "needs a floating dtype");
  EXPECT_ERROR_NAMING(comm.reduce_scatter(zeros({3})), "does not split into 2 equal chunks");
  EXPECT_ERROR_NAMING(comm.broadcast(zeros({3}), -1), "root -1 is not a rank");
  EXPECT_ERROR_NAMING(InprocCommunicator(make_inproc_rendezvous(2), 2), "rank 2 is not in a world of size 2");
  EXPECT_ERROR_NAMING(make_inproc_rendezvous(0), "world_size must be >= 1");
  EXPECT_ERROR_NAMING(run_inproc(0, [](Communicator&) {}), "world_size must be >= 1");
}

// Every rank's error, collected by rank.
struct Errors {
  std::mutex mu;
  std::vector<std::string> by_rank;
  explicit Errors(int n) : by_rank(n) {}
  void set(int rank, const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    by_rank[rank] = text;
  }
};

TEST(InprocCommunicatorTest, MismatchedShapesFailOnEveryRank) {
  Errors errors(4);
  EXPECT_THROW(run_inproc(4,
                          [&](Communicator& comm) {
                            comm.all_reduce(zeros({2})).wait();
                            Tensor t = comm.rank() == 2 ? zeros({3, 2}) : zeros({2, 3});
                            try {
                              comm.all_reduce(t).wait();
                            } catch (const Error& e) {
                              errors.set(comm.rank(), e.what());
                              throw;
                            }
                          }),
               Error);
  for (const std::string& e : errors.by_rank) {
    EXPECT_EQ(
        e,
        "all_reduce #1: the ranks' calls differ in shape: rank 0 all_reduce(sum) f32 [2, 3]; "
        "rank 1 all_reduce(sum) f32 [2, 3]; rank 2 all_reduce(sum) f32 [3, 2]; rank 3 all_reduce(sum) f32 [2, 3]");
  }
}

TEST(InprocCommunicatorTest, MismatchedOpsAndDtypes) {
  Errors errors(2);
  run_inproc(2, [&](Communicator& comm) {  // each rank catches its error
    try {
      if (comm.rank() == 0) {
        comm.all_reduce(zeros({4})).wait();
      } else {
        comm.all_gather(zeros({4}, DType::kF64)).wait();
      }
    } catch (const Error& e) { errors.set(comm.rank(), e.what()); }
    // The world is aborted: later collectives fail at once.
    EXPECT_ERROR_NAMING(comm.barrier(), "collective #0");
  });
  for (const std::string& e : errors.by_rank) {
    EXPECT_EQ(
        e, "collective #0: the ranks' calls differ in op: rank 0 all_reduce(sum) f32 [4]; rank 1 all_gather f64 [4]");
  }
  EXPECT_ERROR_NAMING(run_inproc(2,
                                 [&](Communicator& comm) {
                                   comm.all_reduce(zeros({4}, comm.rank() == 0 ? DType::kF32 : DType::kBF16)).wait();
                                 }),
                      "all_reduce #0: the ranks' calls differ in dtype: rank 0 all_reduce(sum) f32 [4]; "
                      "rank 1 all_reduce(sum) bf16 [4]");
  EXPECT_ERROR_NAMING(run_inproc(2,
                                 [&](Communicator& comm) {
                                   comm.all_gather_v(zeros({1, comm.rank() + 1})).wait();
                                 }),
                      "all_gather_v #0: the ranks' calls differ in shape");
  EXPECT_ERROR_NAMING(run_inproc(2, [&](Communicator& comm) { comm.broadcast(zeros({1}), comm.rank()).wait(); }),
                      "differ in root: rank 0 broadcast(root 0) f32 [1]; rank 1 broadcast(root 1) f32 [1]");
}

TEST(InprocCommunicatorTest, ThrowingRankAbortsTheOthers) {
  InprocOptions options;
  options.timeout = milliseconds(20000);  // the failure must not wait for it
  Errors errors(4);
  const Clock::time_point start = Clock::now();
  try {
    run_inproc(
        4,
        [&](Communicator& comm) {
          comm.barrier().wait();
          if (comm.rank() == 1) throw std::runtime_error("boom");
          try {
            comm.all_reduce(zeros({8})).wait();
          } catch (const Error& e) {
            errors.set(comm.rank(), e.what());
            throw;
          }
        },
        options);
    ADD_FAILURE() << "run_inproc returned";
  } catch (const Error& e) {
    ADD_FAILURE() << "the rank's own exception should come back, got " << e.what();
  } catch (const std::runtime_error& e) { EXPECT_STREQ(e.what(), "boom"); }
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  for (int r : {0, 2, 3}) EXPECT_EQ(errors.by_rank[r], "rank 1 failed: boom");
}

TEST(InprocCommunicatorTest, HangingRankTimesOut) {
  InprocOptions options;
  options.timeout = milliseconds(100);
  std::atomic<bool> release{false};
  Errors errors(4);
  std::vector<double> waited(4, 0);
  EXPECT_ERROR_NAMING(run_inproc(
                          4,
                          [&](Communicator& comm) {
                            Tensor t = ones({3});
                            comm.all_reduce(t).wait();
                            comm.barrier().wait();
                            if (comm.rank() == 1) {  // hangs in its own code until the others gave up
                              const Clock::time_point until = Clock::now() + milliseconds(5000);
                              while (!release.load() && Clock::now() < until)
                                std::this_thread::sleep_for(milliseconds(2));
                            }
                            const Clock::time_point start = Clock::now();
                            try {
                              comm.all_reduce(t).wait();
                            } catch (const Error& e) {
                              waited[comm.rank()] = std::chrono::duration<double>(Clock::now() - start).count();
                              errors.set(comm.rank(), e.what());
                              release.store(true);
                              throw;
                            }
                          },
                          options),
                      "rank 1 did not reach all_reduce #2 within 0.1 s");
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(errors.by_rank[r], "rank 1 did not reach all_reduce #2 within 0.1 s");
    EXPECT_LT(waited[r], 2.0);  // the timeout, plus generous slack for sanitizers
  }
  // The hung rank, once it comes back, finds the world aborted.
  EXPECT_EQ(errors.by_rank[1], "rank 1 did not reach all_reduce #2 within 0.1 s");
}

TEST(InprocCommunicatorTest, RankThatEndsEarly) {
  InprocOptions options;
  options.timeout = milliseconds(20000);
  const Clock::time_point start = Clock::now();
  EXPECT_ERROR_NAMING(run_inproc(
                          3,
                          [&](Communicator& comm) {
                            comm.barrier().wait();
                            if (comm.rank() == 2) return;
                            comm.all_reduce(zeros({2})).wait();
                          },
                          options),
                      "rank 2 ended without reaching all_reduce #1");
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

// A rank stuck in its own code cannot be stopped; run_inproc says so and waits.
TEST(InprocCommunicatorTest, StuckRankIsReported) {
  InprocOptions options;
  options.timeout = milliseconds(30);
  ::testing::internal::CaptureStderr();
  EXPECT_ERROR_NAMING(run_inproc(
                          2,
                          [&](Communicator& comm) {
                            if (comm.rank() == 0) fail("rank zero gave up");
                            std::this_thread::sleep_for(milliseconds(250));
                          },
                          options),
                      "rank zero gave up");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("run_inproc: 1 of 2 ranks still running 0.06 s after the first error (rank zero gave up)"),
            std::string::npos)
      << err;
}

// A rank may end with collectives in flight: the others still complete them.
TEST(InprocCommunicatorTest, RankMayEndWithoutWaiting) {
  run_inproc(2, [&](Communicator& comm) {
    Tensor t = full({2}, comm.rank() + 1.0);
    Work w = comm.all_reduce(t);
    if (comm.rank() == 0) {
      w.wait();
      EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{3, 3}));
    }
  });
}

// Floats whose sums depend on the order they are added in.
std::vector<float> noisy(int rank, int n) {
  std::vector<float> v(n);
  uint32_t s = 0x9e3779b9u * static_cast<uint32_t>(rank + 1);
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float mantissa = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) - 0.5f;
    v[i] = mantissa * std::ldexp(1.0f, static_cast<int>(s % 40) - 20);
  }
  return v;
}

TEST(InprocCommunicatorTest, ReductionsAreBitIdenticalInRankOrder) {
  const int n = 4, len = 4096;
  auto run_once = [&](DType dtype, ReduceOp op) {
    std::vector<std::vector<uint8_t>> bytes(n);
    run_inproc(n, [&](Communicator& comm) {
      // Ranks arrive in a scrambled order; the sum must not care.
      std::this_thread::sleep_for(milliseconds((3 - comm.rank()) * 3));
      Tensor t = from_vector<float>(noisy(comm.rank(), len)).to(dtype);
      comm.all_reduce(t, op).wait();
      const uint8_t* p = static_cast<const uint8_t*>(t.data_ptr());
      bytes[comm.rank()].assign(p, p + t.numel() * dtype_size(dtype));
    });
    for (int r = 1; r < n; ++r) EXPECT_EQ(bytes[r], bytes[0]) << "rank " << r;
    return bytes[0];
  };
  // f32: exactly ((x0 + x1) + x2) + x3, then / 4 for average.
  std::vector<uint8_t> sum = run_once(DType::kF32, ReduceOp::kSum);
  std::vector<uint8_t> avg = run_once(DType::kF32, ReduceOp::kAverage);
  std::vector<std::vector<float>> x;
  for (int r = 0; r < n; ++r) x.push_back(noisy(r, len));
  std::vector<float> want(len), want_avg(len);
  bool order_matters = false;
  for (int i = 0; i < len; ++i) {
    float acc = x[0][i];
    for (int r = 1; r < n; ++r) acc += x[r][i];
    want[i] = acc;
    want_avg[i] = acc / 4.0f;
    float reversed = x[3][i];
    for (int r = 2; r >= 0; --r) reversed += x[r][i];
    order_matters |= reversed != acc;
  }
  EXPECT_TRUE(order_matters) << "the data should make the order visible";
  EXPECT_EQ(std::memcmp(sum.data(), want.data(), sum.size()), 0);
  EXPECT_EQ(std::memcmp(avg.data(), want_avg.data(), avg.size()), 0);
  // Run to run, for every float dtype.
  for (DType dtype : kFloating) {
    EXPECT_EQ(run_once(dtype, ReduceOp::kSum), run_once(dtype, ReduceOp::kSum)) << dtype_name(dtype);
  }
}

TEST(InprocCommunicatorTest, IntegerSumsWrapAndMaxPropagatesNan) {
  run_inproc(2, [&](Communicator& comm) {
    Tensor u = full({1}, 200.0, DType::kU8);
    comm.all_reduce(u).wait();
    EXPECT_EQ(u.item(), 144.0);  // 400 mod 256
    Tensor x = from_vector<float>({1.0f, comm.rank() == 1 ? NAN : 2.0f});
    comm.all_reduce(x, ReduceOp::kMax).wait();
    EXPECT_EQ(x.to_vector<double>()[0], 1.0);
    EXPECT_TRUE(std::isnan(x.to_vector<double>()[1]));
  });
}

}  // namespace
}  // namespace coppice
