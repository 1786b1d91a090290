// Tests for distributed/grad_sync.h on the in-process backend (1, 2 and 4
// ranks, CPU): N ranks averaging the gradients of their batch slices equal
// one rank on the whole batch (dense, CSR, COO and BSR weights, compact and
// densified, one bucket and many, f32 and f64), bit-identical on every rank;
// buckets issued while backward runs; bytes sent; top-k with error feedback;
// mismatched leaves, misuse and a rank failing inside backward.
#include "distributed/grad_sync.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/functions/sparse.h"
#include "distributed/inproc_communicator.h"
#include "gtest/gtest.h"
#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/ops.h"
#include "tests/util/error_matchers.h"

namespace coppice {
namespace {

constexpr int64_t kBatch = 8;  // divisible by every world size tested

// A tensor of any format with its own values (the pattern, and its version, shared).
Tensor copy_of(const Tensor& t) { return t.is_dense() ? t.clone() : with_values(t, values(t).clone()); }

// Initial values and data, made once on the main thread; every rank copies them.
struct Init {
  Tensor unused, w1, b1, w2, b2;  // unused gets no gradient
  Tensor x, target;               // the whole batch
};

Init make_init(const std::string& w2_format, DType dtype) {
  Generator gen(7);
  Init init;
  init.unused = randn({3}, dtype, gen);
  init.w1 = randn({8, 6}, dtype, gen);
  init.b1 = randn({8}, dtype, gen);
  Tensor w2 = randn({4, 8}, dtype, gen);
  if (w2_format != "dense") {
    Tensor mask = lt(rand({4, 8}, dtype, gen), 0.5);
    FormatOptions options = w2_format == "bsr" ? FormatOptions::block(2) : FormatOptions{};
    w2 = sparse_from_mask(w2, mask, w2_format, options);
  }
  init.w2 = w2;
  init.b2 = randn({4}, dtype, gen);
  init.x = randn({kBatch, 6}, dtype, gen);
  init.target = randn({kBatch, 4}, dtype, gen);
  return init;
}

// Two linear layers: relu(x w1^T + b1) w2^T + b2, mean squared error.
struct Model {
  Variable unused, w1, b1, w2, b2;

  explicit Model(const Init& init)
      : unused(copy_of(init.unused), true, "unused"),
        w1(copy_of(init.w1), true, "fc1.weight"),
        b1(copy_of(init.b1), true, "fc1.bias"),
        w2(copy_of(init.w2), true, "fc2.weight"),
        b2(copy_of(init.b2), true, "fc2.bias") {}

  // `unused` first: its bucket, which waits for end(), comes last.
  NamedLeaves leaves() const {
    return {{unused.name(), unused}, {w1.name(), w1}, {b1.name(), b1}, {w2.name(), w2}, {b2.name(), b2}};
  }
  std::vector<Variable> all() const { return {unused, w1, b1, w2, b2}; }

  Variable loss(const Tensor& x, const Tensor& target) const {
    Variable h = relu(linear(Variable(x), w1, b1));
    Variable d = sub(linear(h, w2, b2), Variable(target));
    return mean(mul(d, d));
  }
};

Tensor rows(const Tensor& t, int rank, int world) {
  const int64_t n = t.size(0) / world;
  return t.narrow(0, rank * n, n).contiguous();
}

// A leaf's gradient as a dense tensor; zeros when it has none.
Tensor dense_grad(const Variable& v) {
  return v.grad().defined() ? to_dense(v.grad()).clone() : zeros(v.shape(), v.value().options());
}

using SyncCase = std::tuple<int, std::string, bool, int64_t, DType>;  // world, w2 format, compact, bucket, dtype

class GradSyncMatchTest : public ::testing::TestWithParam<SyncCase> {};

TEST_P(GradSyncMatchTest, RanksAverageToOneRankOnTheWholeBatch) {
  // Plain variables, not a structured binding: the rank lambda captures them
  // (C++17 does not allow capturing bindings; gcc accepts it, clang does not).
  const int world = std::get<0>(GetParam());
  const std::string format = std::get<1>(GetParam());
  const bool compact = std::get<2>(GetParam());
  const int64_t bucket_bytes = std::get<3>(GetParam());
  const DType dtype = std::get<4>(GetParam());
  const Init init = make_init(format, dtype);

  Model reference(init);
  reference.loss(init.x, init.target).backward();

  std::vector<std::vector<Tensor>> grads(world);  // [rank][leaf], dense
  std::vector<std::vector<Tensor>> raw(world);    // [rank][leaf], as set
  run_inproc(world, [&](Communicator& comm) {
    Model model(init);
    GradientSync sync(comm, {bucket_bytes, compact});
    sync.begin(model.leaves());
    model.loss(rows(init.x, comm.rank(), world), rows(init.target, comm.rank(), world)).backward();
    sync.end();
    for (const Variable& v : model.all()) {
      raw[comm.rank()].push_back(v.grad());
      grads[comm.rank()].push_back(dense_grad(v));
    }
    // A sparse leaf's gradient has the leaf's format and pattern.
    ASSERT_TRUE(model.w2.grad().defined());
    EXPECT_EQ(model.w2.grad().format(), model.w2.value().format());
    EXPECT_EQ(pattern_version(model.w2.grad()), pattern_version(model.w2.value()));
    const GradSyncStats& st = sync.last_stats();
    EXPECT_EQ(st.collectives, st.buckets);
    EXPECT_EQ(st.bytes, st.dense_bytes + st.compact_bytes);
    if (format != "dense") { EXPECT_GT(st.compact_bytes, 0); }
  });

  const double tol = dtype == DType::kF32 ? 2e-6 : 1e-13;
  const std::vector<Variable> ref = reference.all();
  for (size_t i = 0; i < ref.size(); ++i) {
    const Tensor want = dense_grad(ref[i]);
    EXPECT_LE(max_abs_diff(grads[0][i], want), tol) << ref[i].name();
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(max_abs_diff(grads[r][i], grads[0][i]), 0.0) << ref[i].name() << " rank " << r;
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<SyncCase>& info) {
  const auto& [world, format, compact, bucket_bytes, dtype] = info.param;
  return str_cat("w", world, "_", format, compact ? "_compact" : "_densified",
                 bucket_bytes < 1024 ? "_small" : "_large", "_", dtype_name(dtype));
}

INSTANTIATE_TEST_SUITE_P(All, GradSyncMatchTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values("dense", "csr", "coo", "bsr"),
                                            ::testing::Bool(), ::testing::Values(int64_t{16}, int64_t{1} << 20),
                                            ::testing::Values(DType::kF32, DType::kF64)),
                         case_name);

TEST(GradSyncTest, SmallBucketsAreIssuedWhileBackwardRuns) {
  const Init init = make_init("csr", DType::kF32);
  for (int world : {1, 2, 4}) {
    run_inproc(world, [&](Communicator& comm) {
      Model model(init);
      GradientSync sync(comm, {/*bucket_bytes=*/1});
      // fc1.weight is the last leaf backward reaches. This hook, registered
      // before the sync's, runs before fc1.weight's bucket is filled.
      int64_t issued_before_fc1_weight = -1;
      model.w1.register_hook([&](const Tensor&) {
        issued_before_fc1_weight = sync.last_stats().collectives;
        return Tensor();
      });
      const NamedLeaves leaves = {
          {"fc1.weight", model.w1}, {"fc1.bias", model.b1}, {"fc2.weight", model.w2}, {"fc2.bias", model.b2}};
      for (int step = 0; step < 2; ++step) {
        sync.begin(leaves);
        EXPECT_EQ(sync.last_stats().collectives, 0);
        model.loss(rows(init.x, comm.rank(), world), rows(init.target, comm.rank(), world)).backward();
        // Every bucket was complete, and so issued, before backward returned.
        EXPECT_EQ(sync.last_stats().collectives_during_backward, 4);
        sync.end();
        const GradSyncStats& st = sync.last_stats();
        EXPECT_EQ(st.buckets, 4);
        EXPECT_EQ(st.collectives, 4);
        EXPECT_EQ(st.collectives_during_backward, 4);
        // The host's time in the hooks and in end(), this exchange's alone.
        EXPECT_GT(st.hook_seconds, 0.0);
        EXPECT_GT(st.end_seconds, 0.0);
        EXPECT_LT(st.hook_seconds + st.end_seconds, 60.0);
        // The fixed order (fc2.bias, fc2.weight, fc1.bias, fc1.weight): at
        // least fc2's two buckets went out before fc1.weight had a gradient.
        EXPECT_GE(issued_before_fc1_weight, 2);
        EXPECT_LE(issued_before_fc1_weight, 3);
      }
    });
  }
}

TEST(GradSyncTest, LeafWithoutGradientHoldsItsBucketUntilEnd) {
  const Init init = make_init("dense", DType::kF64);
  run_inproc(2, [&](Communicator& comm) {
    Model model(init);
    GradientSync sync(comm, {/*bucket_bytes=*/1});
    sync.begin(model.leaves());
    model.loss(rows(init.x, comm.rank(), 2), rows(init.target, comm.rank(), 2)).backward();
    // Buckets: fc2.bias, fc2.weight, fc1.bias, fc1.weight, then unused.
    EXPECT_EQ(sync.last_stats().collectives_during_backward, 4);
    sync.end();
    EXPECT_EQ(sync.last_stats().collectives, 5);
    EXPECT_EQ(max_abs_diff(model.unused.grad(), zeros({3}, DType::kF64)), 0.0);
  });
}

// Backward leaves each gradient where the op that computed it wrote it: the
// sync reads the gradients for its buckets without keeping them from being
// installed as they are (a hook that held them made every leaf's gradient a
// copy: on the GPT job, 203 MB more a step on the training stream).
TEST(GradSyncTest, BackwardInstallsEachGradientWithoutCopyingIt) {
  for (const char* format : {"dense", "csr"}) {
    const Init init = make_init(format, DType::kF32);
    run_inproc(2, [&](Communicator& comm) {
      Model model(init);
      GradientSync sync(comm);  // one bucket: each gradient waits in it until the last arrives
      // Registered before the sync's: sees each gradient as backward made it.
      std::vector<const void*> made(5, nullptr);
      const std::vector<Variable> all = model.all();
      for (size_t i = 0; i < all.size(); ++i) {
        all[i].register_hook([&made, i](const Tensor& g) {
          made[i] = (g.is_dense() ? g : values(g)).data_ptr();
          return Tensor();
        });
      }
      sync.begin(model.leaves());
      model.loss(rows(init.x, comm.rank(), 2), rows(init.target, comm.rank(), 2)).backward();
      for (size_t i = 1; i < all.size(); ++i) {  // `unused` gets none
        const Tensor& g = all[i].grad();
        ASSERT_TRUE(g.defined()) << all[i].name();
        EXPECT_EQ((g.is_dense() ? g : values(g)).data_ptr(), made[i]) << format << " " << all[i].name();
      }
      sync.end();
      EXPECT_EQ(sync.last_stats().collectives, 1);
    });
  }
}

// Backward writes the dense linears' weight gradients into their buckets
// (gradient destinations) and only the rest is copied in: 2 ranks, layers
// 8 -> 16 -> 8 in f64, in one bucket, also with a 3-element leaf first in
// it (each dense slice is padded to where a fresh CPU tensor would start, 64
// bytes). Each rank's gradients are exactly the rank-order average of what
// each rank's backward gives alone.
TEST(GradSyncTest, WeightGradientsAreWrittenIntoTheirBuckets) {
  Generator gen(11);
  const Tensor w1 = randn({16, 8}, DType::kF64, gen), b1 = randn({16}, DType::kF64, gen);
  const Tensor w2 = randn({8, 16}, DType::kF64, gen), b2 = randn({8}, DType::kF64, gen);
  const Tensor x = randn({6, 8}, DType::kF64, gen), target = randn({6, 8}, DType::kF64, gen);
  struct Net {
    Variable w1, b1, w2, b2, odd;
    NamedLeaves leaves(bool with_odd) const {
      NamedLeaves l = {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
      if (with_odd) l.emplace_back("odd", odd);  // listed last: first in the bucket
      return l;
    }
    Variable loss(const Tensor& x, const Tensor& target) const {
      Variable d = sub(linear(relu(linear(Variable(x), w1, b1)), w2, b2), Variable(target));
      return add(mean(mul(d, d)), sum(odd));
    }
  };
  auto net = [&] {
    return Net{Variable(w1.clone(), true, "w1"), Variable(b1.clone(), true, "b1"), Variable(w2.clone(), true, "w2"),
               Variable(b2.clone(), true, "b2"), Variable(zeros({3}, DType::kF64), true, "odd")};
  };
  // Each rank's gradients alone, [rank][leaf].
  std::vector<std::vector<Tensor>> alone(2);
  run_inproc(2, [&](Communicator& comm) {
    const Net n = net();
    n.loss(rows(x, comm.rank(), 2), rows(target, comm.rank(), 2)).backward();
    for (const auto& [name, v] : n.leaves(true)) alone[comm.rank()].push_back(v.grad().clone());
  });
  for (bool with_odd : {false, true}) {
    run_inproc(2, [&](Communicator& comm) {
      const Net n = net();
      GradientSync sync(comm);
      const NamedLeaves leaves = n.leaves(with_odd);
      sync.begin(leaves);
      n.loss(rows(x, comm.rank(), 2), rows(target, comm.rank(), 2)).backward();
      sync.end();
      // Bias gradients (and odd's) are copied; the weights' are not.
      const int64_t copied = (16 + 8 + (with_odd ? 3 : 0)) * 8;
      EXPECT_EQ(sync.last_stats().copied_bytes, copied) << with_odd;
      EXPECT_EQ(sync.last_stats().collectives, 1);
      for (size_t i = 0; i < leaves.size(); ++i) {
        const Tensor want = div(add(alone[0][i], alone[1][i]), 2.0);
        EXPECT_EQ(max_abs_diff(leaves[i].second.grad(), want), 0.0) << leaves[i].first << " " << with_odd;
      }
      // Outside begin() and end() backward writes into no bucket.
      EXPECT_FALSE(n.w1.grad_destination().defined());
    });
  }
}

// Gradients accumulated over micro-batches before begin() are exchanged with
// the last one's: each rank sends its leaves' gradients as backward leaves
// them, so two ranks accumulating two half-batches each equal one rank on
// the whole batch. A leaf that the last backward does not reach sends what
// it holds.
TEST(GradSyncTest, GradientsAccumulatedBeforeBeginAreExchanged) {
  const Init init = make_init("dense", DType::kF64);
  std::vector<Tensor> whole;
  run_inproc(1, [&](Communicator&) {
    Model model(init);
    Variable loss = model.loss(init.x, init.target);
    // The held gradient of `unused`, which no backward reaches.
    model.unused.set_grad(full({3}, 0.5, DType::kF64));
    loss.backward();
    for (const Variable& v : model.all()) whole.push_back(dense_grad(v));
  });
  run_inproc(2, [&](Communicator& comm) {
    Model model(init);
    GradientSync sync(comm);
    const Tensor x = rows(init.x, comm.rank(), 2), target = rows(init.target, comm.rank(), 2);
    const int64_t half = x.size(0) / 2;
    // Half of each micro-batch's mean: the two add up to the mean over the
    // rank's rows, whose average over ranks is the whole batch's mean.
    auto micro = [&](int64_t i) {
      return div(model.loss(x.narrow(0, i * half, half), target.narrow(0, i * half, half)), 2.0);
    };
    model.unused.set_grad(full({3}, 0.5, DType::kF64));
    micro(0).backward();  // no exchange: accumulated locally
    sync.begin(model.leaves());
    micro(1).backward();
    sync.end();
    const std::vector<Variable> all = model.all();
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_LE(max_abs_diff(dense_grad(all[i]), whole[i]), 1e-12) << all[i].name();
    }
  });
}

// loss = sum(w * c): the gradient of w is exactly c.
Variable linear_loss(const Variable& w, const Tensor& c) { return sum(mul(w, Variable(c))); }

TEST(GradSyncTest, CompactBytesFallWithDensity) {
  // [20, 50] f32 at 90 % sparsity: 100 of 1000 entries stored.
  std::vector<double> mask_values(1000);
  for (size_t i = 0; i < mask_values.size(); ++i) mask_values[i] = i % 10 == 0 ? 1 : 0;
  const Tensor mask = ne(from_vector<double>(mask_values, {20, 50}), 0.0);
  Generator gen(3);
  const Tensor dense = randn({20, 50}, DType::kF32, gen);
  const Tensor csr = sparse_from_mask(dense, mask, "csr");
  ASSERT_EQ(nnz(csr), 100);
  const Tensor c = randn({20, 50}, DType::kF32, gen);

  run_inproc(2, [&](Communicator& comm) {
    auto sent = [&](const Tensor& value, bool compact) {
      Variable w(copy_of(value), true, "w");
      GradientSync sync(comm, {GradSyncOptions().bucket_bytes, compact});
      sync.begin({{"w", w}});
      linear_loss(w, c).backward();
      sync.end();
      return sync.last_stats();
    };
    const GradSyncStats d = sent(dense, true);
    EXPECT_EQ(d.dense_bytes, 4000);
    EXPECT_EQ(d.compact_bytes, 0);
    EXPECT_EQ(d.bytes, 4000);
    EXPECT_EQ(d.collectives, 1);
    const GradSyncStats s = sent(csr, true);
    EXPECT_EQ(s.dense_bytes, 0);
    EXPECT_EQ(s.compact_bytes, 400);  // 10 % of the dense bytes
    EXPECT_EQ(s.bytes, 400);
    EXPECT_EQ(s.collectives, 1);
    const GradSyncStats baseline = sent(csr, false);
    EXPECT_EQ(baseline.compact_bytes, 4000);
    EXPECT_EQ(baseline.bytes, 4000);
  });
}

TEST(GradSyncTest, TopKWithAllEntriesEqualsPlainAveraging) {
  Generator gen(11);
  const int world = 4;
  std::vector<Tensor> c;
  for (int r = 0; r < world; ++r) c.push_back(randn({64}, DType::kF64, gen));
  const Tensor init = randn({64}, DType::kF64, gen);
  run_inproc(world, [&](Communicator& comm) {
    Variable w_topk(init.clone(), true, "w"), w_plain(init.clone(), true, "w");
    GradSyncOptions topk_options;
    topk_options.topk_fraction = 1.0;
    topk_options.topk_min_numel = 0;
    GradientSync topk_sync(comm, topk_options), plain_sync(comm);
    for (int step = 0; step < 2; ++step) {
      topk_sync.begin({{"w", w_topk}});
      linear_loss(w_topk, c[comm.rank()]).backward();
      topk_sync.end();
      plain_sync.begin({{"w", w_plain}});
      linear_loss(w_plain, c[comm.rank()]).backward();
      plain_sync.end();
      EXPECT_LE(max_abs_diff(w_topk.grad(), w_plain.grad()), 1e-14);
      EXPECT_EQ(max_abs_diff(topk_sync.residuals().at("w"), zeros({64}, DType::kF64)), 0.0);
      EXPECT_EQ(topk_sync.last_stats().topk_bytes, 64 * (8 + 8));
      EXPECT_EQ(topk_sync.last_stats().collectives, 2);
    }
  });
}

TEST(GradSyncTest, TopKSendsLargestEntriesAndKeepsTheRestAsResidual) {
  constexpr int kSteps = 3;
  constexpr int64_t kNumel = 100;
  for (int world : {1, 2, 4}) {
    Generator gen(5);
    std::vector<std::vector<Tensor>> g(kSteps);  // [step][rank]
    for (auto& step : g) {
      for (int r = 0; r < world; ++r) step.push_back(randn({kNumel}, DType::kF64, gen));
    }
    // [step][rank]: the gradient applied, and what each rank sent.
    std::vector<std::vector<Tensor>> applied(kSteps, std::vector<Tensor>(world));
    std::vector<std::vector<Tensor>> sent(kSteps, std::vector<Tensor>(world));
    std::vector<Tensor> final_residual(world);
    run_inproc(world, [&](Communicator& comm) {
      const int rank = comm.rank();
      Variable w(zeros({kNumel}, DType::kF64), true, "w");
      GradSyncOptions options;
      options.topk_fraction = 0.05;  // k = 5
      options.topk_min_numel = 10;
      GradientSync sync(comm, options);
      for (int step = 0; step < kSteps; ++step) {
        w.set_grad(Tensor());  // else backward adds this step's gradient to the last step's average
        sync.begin({{"w", w}});
        const Tensor old_residual = sync.residuals().at("w").clone();
        linear_loss(w, g[step][rank]).backward();
        sync.end();
        const Tensor acc = add(g[step][rank], old_residual);
        const Tensor residual = sync.residuals().at("w");
        // Exactly k entries were sent (zeroed in the residual); the rest is kept bit for bit.
        const std::vector<double> a = acc.to_vector<double>(), res = residual.to_vector<double>();
        int64_t zeroed = 0;
        double smallest_sent = INFINITY, largest_kept = 0;
        for (int64_t i = 0; i < kNumel; ++i) {
          if (res[i] == 0.0 && a[i] != 0.0) {
            ++zeroed;
            smallest_sent = std::min(smallest_sent, std::abs(a[i]));
          } else {
            EXPECT_EQ(res[i], a[i]) << "entry " << i;
            largest_kept = std::max(largest_kept, std::abs(a[i]));
          }
        }
        EXPECT_EQ(zeroed, 5);
        EXPECT_GE(smallest_sent, largest_kept);
        EXPECT_EQ(sync.last_stats().topk_bytes, 5 * (8 + 8));
        sent[step][rank] = sub(acc, residual);  // g + old residual - new residual
        applied[step][rank] = w.grad().clone();
      }
      final_residual[rank] = sync.residuals().at("w").clone();
    });
    Tensor total_in = zeros({kNumel}, DType::kF64), total_out = zeros({kNumel}, DType::kF64);
    for (int step = 0; step < kSteps; ++step) {
      Tensor sum_sent = zeros({kNumel}, DType::kF64);
      for (int r = 0; r < world; ++r) {
        sum_sent = add(sum_sent, sent[step][r]);
        total_in = add(total_in, g[step][r]);
        EXPECT_EQ(max_abs_diff(applied[step][r], applied[step][0]), 0.0) << "rank " << r;
      }
      EXPECT_LE(max_abs_diff(applied[step][0], div(sum_sent, world)), 1e-15) << "step " << step;
      total_out = add(total_out, mul(applied[step][0], static_cast<double>(world)));
    }
    // Nothing is lost: what went in is what was applied plus what is still held back.
    for (int r = 0; r < world; ++r) total_out = add(total_out, final_residual[r]);
    EXPECT_LE(max_abs_diff(total_out, total_in), 1e-12) << "world " << world;
  }
}

TEST(GradSyncTest, RanksWithDifferentLeavesFailNamingTheLeaf) {
  for (int world : {2, 4}) {
    // A different shape on the last rank.
    run_inproc(world, [&](Communicator& comm) {
      const bool odd = comm.rank() == world - 1;
      Variable a(zeros({2}), true, "a"), w(zeros({odd ? 4 : 3}), true, "w");
      GradientSync sync(comm);
      EXPECT_TRUE(testing::throws_with(
          [&] {
            sync.begin({{"a", a}, {"w", w}});
          },
          {"'w' f32 [3]", "'w' f32 [4]", str_cat("rank ", world - 1)}));
    });
    // A different name on rank 1.
    run_inproc(world, [&](Communicator& comm) {
      Variable a(zeros({2}), true, "a"), w(zeros({3}), true, "w");
      GradientSync sync(comm);
      const std::string name = comm.rank() == 1 ? "v" : "w";
      EXPECT_TRUE(testing::throws_with([&] { sync.begin({{"a", a}, {name, w}}); }, {"'w'", "'v'", "rank 1"}));
      // The failed begin left nothing behind: a consistent begin works.
      sync.begin({{"a", a}, {"w", w}});
      sum(mul(a, 2.0)).backward();
      sync.end();
      EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>({2, 2}));
      EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>({0, 0, 0}));
    });
    // A missing leaf on rank 0.
    run_inproc(world, [&](Communicator& comm) {
      Variable a(zeros({2}), true, "a"), w(zeros({3}), true, "w");
      GradientSync sync(comm);
      NamedLeaves leaves = {{"a", a}};
      if (comm.rank() != 0) leaves.push_back({"w", w});
      EXPECT_TRUE(testing::throws_with([&] { sync.begin(leaves); }, {"'w'", "no counterpart on rank 0"}));
    });
  }
}

TEST(GradSyncTest, Misuse) {
  run_inproc(1, [&](Communicator& comm) {
    Variable a(zeros({2}), true, "a");
    GradientSync sync(comm);
    EXPECT_ERROR_NAMING(sync.end(), "no begin()");
    sync.begin({{"a", a}});
    EXPECT_ERROR_NAMING(sync.begin({{"a", a}}), "was not ended");
    sync.end();
    Variable frozen(zeros({2}), false, "frozen");
    EXPECT_ERROR_NAMING(sync.begin({{"frozen", frozen}}), "'frozen' does not require grad");
    EXPECT_ERROR_NAMING(sync.begin({{"a", a}, {"a2", a}}), "'a2' is passed twice");
    EXPECT_ERROR_NAMING(sync.begin({{"a", a}, {"a", Variable(zeros({1}), true)}}), "'a' appears twice");
    EXPECT_ERROR_NAMING(GradientSync(comm, {0}), "bucket_bytes");
    GradSyncOptions bad;
    bad.topk_fraction = 1.5;
    EXPECT_ERROR_NAMING(GradientSync(comm, bad), "topk_fraction");
    // Two backward passes in one step.
    sync.begin({{"a", a}});
    sum(a).backward();
    EXPECT_ERROR_NAMING(sum(a).backward(), "second gradient");
    sync.end();
  });
}

TEST(GradSyncTest, RankFailingInsideBackwardFailsTheOthers) {
  InprocOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const Init init = make_init("csr", DType::kF32);
  for (int world : {2, 4}) {
    std::atomic<int> others_failed{0};
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(run_inproc(
                     world,
                     [&](Communicator& comm) {
                       Model model(init);
                       GradientSync sync(comm, {/*bucket_bytes=*/1});
                       if (comm.rank() == 1) {
                         model.w1.register_hook([](const Tensor&) -> Tensor { throw std::runtime_error("boom"); });
                       }
                       sync.begin(model.leaves());
                       Variable loss =
                           model.loss(rows(init.x, comm.rank(), world), rows(init.target, comm.rank(), world));
                       if (comm.rank() == 1) {
                         loss.backward();  // throws
                         return;
                       }
                       try {
                         loss.backward();
                         sync.end();
                       } catch (const Error& e) {
                         ++others_failed;
                         EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
                       }
                     },
                     options),
                 std::runtime_error);
    EXPECT_EQ(others_failed.load(), world - 1);
    // The abort reached the others at once, not at the timeout.
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1500));
  }
}

}  // namespace
}  // namespace coppice
