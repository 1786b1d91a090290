// The non-finite check on CUDA (optim/cuda/finite_check.cu) against its CPU
// twin (optim/finite_check.cc): the same flags for every floating dtype, for
// sizes around the block and grid bounds, with an inf or a NaN at the first,
// a middle and the last position or none; flags per slot, folded across
// devices; sparse formats' stored values. Every test skips, saying why, when
// no GPU is present.
#include "optim/finite_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sparse/convert.h"
#include "sparse/sparse_impl.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace coppice {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!coppice::cuda_available()) GTEST_SKIP() << "no CUDA device: the non-finite check's CUDA kernel cannot run here"

const Device kCuda = Device::cuda(0);

// n ordinary values (f64 on the host) with `bad` at `at` (< 0: none).
Tensor host_values(int64_t n, double bad, int64_t at, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i)) * 100.0;
  if (at >= 0) v[static_cast<size_t>(at)] = bad;
  return from_vector(v, {n}, TensorOptions(DType::kF64)).to(dtype);
}

// The flags a NonfiniteFlag holds after `t` went into slot 1 of 3, on the host.
std::vector<bool> flags_of(const Tensor& t) {
  NonfiniteFlag flag(3);
  flag.add(zeros({4}, TensorOptions(DType::kF32, t.device())), 0);
  flag.add(t, 1);
  std::vector<bool> out;
  for (float f : flag.value().to(Device::cpu()).to_vector<float>()) out.push_back(std::isnan(f));
  return out;
}

TEST(NonfiniteFlagCuda, MatchesTheCpuTwin) {
  SKIP_WITHOUT_CUDA();
  const double kInf = std::numeric_limits<double>::infinity(), kNan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{100003}, int64_t{1} << 22}) {
      for (double bad : {kNan, kInf, -kInf}) {
        for (int64_t at : {int64_t{-1}, int64_t{0}, n / 2, n - 1}) {
          const Tensor cpu = host_values(n, bad, at, dtype);
          const std::string what = str_cat(dtype_name(dtype), " n=", n, " bad=", bad, " at=", at);
          const std::vector<bool> want = flags_of(cpu);
          EXPECT_EQ(want[1], at >= 0) << what;
          EXPECT_EQ(flags_of(cpu.to(kCuda)), want) << what;
        }
      }
    }
  }
}

TEST(NonfiniteFlagCuda, SparseValuesAndFlagsFromAnotherDevice) {
  SKIP_WITHOUT_CUDA();
  const Tensor dense = host_values(64, 0, -1, DType::kF32).reshape({8, 8});
  const Tensor mask = gt(abs(dense), 50.0);
  for (const char* format : {"coo", "csr", "masked"}) {
    const Tensor t = sparse_from_mask(dense, mask, format);
    std::vector<double> v = values(t).to(DType::kF64).to_vector<double>();
    // A stored value that counts: a masked tensor's values are dense, and
    // only its mask-true ones are judged.
    size_t at = 0;
    if (std::string(format) == "masked") {
      const std::vector<double> on = mask.reshape({64}).to(DType::kF64).to_vector<double>();
      while (on[at] == 0.0) ++at;
    }
    v[at] = std::numeric_limits<double>::quiet_NaN();
    const Tensor bad = with_values(t, from_vector(v, values(t).shape(), TensorOptions(DType::kF64)).to(DType::kF32));
    EXPECT_TRUE(all_finite(to_device(t, kCuda))) << format;
    EXPECT_FALSE(all_finite(to_device(bad, kCuda))) << format;
  }
  // A CUDA tensor folded into a flag that lives on the CPU, and the reverse.
  NonfiniteFlag on_cpu;
  on_cpu.add(zeros({3}));
  on_cpu.add(host_values(10, std::numeric_limits<double>::infinity(), 4, DType::kF32).to(kCuda));
  EXPECT_FALSE(on_cpu.all_finite());
  NonfiniteFlag on_gpu;
  on_gpu.add(zeros({3}, TensorOptions(DType::kF32, kCuda)));
  on_gpu.add(host_values(10, 0, -1, DType::kF32));
  EXPECT_TRUE(on_gpu.all_finite());
  on_gpu.add(host_values(10, std::numeric_limits<double>::quiet_NaN(), 9, DType::kF32));
  EXPECT_FALSE(on_gpu.all_finite());
}

}  // namespace
}  // namespace coppice
