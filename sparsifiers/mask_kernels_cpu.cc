// CPU kernels of the selection primitives (mask_ops.h has the table), twins
// of cuda/mask_kernels.cu: the element rules are mask_keys.h's, so both give
// the same masks bit for bit.
//
// topk: every element gets a composite key (order key, then the complement
// of its index), distinct by construction; nth_element finds the k-th
// largest, and an element is kept when its composite is at least that one.
// That is exactly "the k largest, ties to the lower index".
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "sparsifiers/mask_keys.h"
#include "tensor/cpu/parallel.h"
#include "tensor/dispatcher.h"
#include "tensor/op_table.h"
#include "tensor/philox.h"

namespace coppice::sparsify {
namespace {

using namespace sparsify_detail;  // NOLINT: the shared element rules
using cpu::parallel_for;

constexpr int64_t kGrain = 1 << 15;

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// keep ? y : +0, without a branch (keep is random: a branch mispredicts).
template <typename C>
inline C kept_or_zero(bool keep, C y) {
  using U = std::conditional_t<sizeof(C) == 8, uint64_t, uint32_t>;
  U u;
  std::memcpy(&u, &y, sizeof(u));
  u &= U(0) - static_cast<U>(keep);
  std::memcpy(&y, &u, sizeof(y));
  return y;
}

template <typename T, bool kRandom, bool kValues>
void stream_kernel(const Tensor& x, const Tensor& out, const Attrs& a) {
  using C = compute_t<T>;
  const double t = a.get_double("threshold");
  const float p = static_cast<float>(a.get_double("p"));
  const uint64_t seed = static_cast<uint64_t>(a.get_int("seed"));
  const uint64_t offset = static_cast<uint64_t>(a.get_int("offset"));
  const C scale = static_cast<C>(a.get_double("scale"));
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = kValues ? static_cast<T*>(out.data_ptr()) : nullptr;
  bool* mp = kValues ? nullptr : static_cast<bool*>(out.data_ptr());
  auto put = [&](int64_t i, bool keep, C v) {
    if constexpr (kValues) {
      yp[i] = T(kept_or_zero(keep, v * scale));
    } else {
      mp[i] = keep;
    }
  };
  parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (kRandom) {
      for (int64_t i = begin; i < end;) {  // one Philox block serves four elements
        const philox::U32x4 b = philox::block(seed, offset, static_cast<uint64_t>(i) / 4);
        const uint32_t words[4] = {b.x, b.y, b.z, b.w};
        const int64_t stop = std::min(end, (i / 4 + 1) * 4);
        for (; i < stop; ++i) put(i, philox::uniform_f32(words[i & 3]) >= p, static_cast<C>(xp[i]));
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const C v = static_cast<C>(xp[i]);
        put(i, threshold_keeps(static_cast<double>(v), t), v);
      }
    }
  });
}

std::vector<Tensor> sparsify_stream(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor& x = in.at(0);
  Tensor out = Tensor::empty(x.shape(), a.get_bool("values") ? x.options() : TensorOptions(DType::kBool));
  const bool random = a.get_string("mode") == "random", values = a.get_bool("values");
  dispatch_floating(x.dtype(), op::kSparsifyStream, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (random) {
      values ? stream_kernel<T, true, true>(x, out, a) : stream_kernel<T, true, false>(x, out, a);
    } else {
      values ? stream_kernel<T, false, true>(x, out, a) : stream_kernel<T, false, false>(x, out, a);
    }
  });
  return {out};
}

template <typename T>
void topk_kernel(const T* keys, int64_t n, int64_t k, bool magnitude, bool* out) {
  if (k == 0 || k == n) {
    std::fill(out, out + n, k == n);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    // n < 2^31: the order key in the high word, the index's complement in the low one.
    auto composite = [&](int64_t i) {
      return (static_cast<uint64_t>(key_of<T>(keys[i], magnitude)) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
    };
    std::vector<uint64_t> c(static_cast<size_t>(n));
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) c[i] = composite(i);
    });
    std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), std::greater<uint64_t>());
    const uint64_t cut = c[k - 1];
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = composite(i) >= cut;
    });
  } else {
    using P = std::pair<uint64_t, uint64_t>;
    auto composite = [&](int64_t i) { return P(key_of<T>(keys[i], magnitude), ~static_cast<uint64_t>(i)); };
    std::vector<P> c(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[i] = composite(i);
    std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), std::greater<P>());
    const P cut = c[k - 1];
    for (int64_t i = 0; i < n; ++i) out[i] = composite(i) >= cut;
  }
}

std::vector<Tensor> sparsify_topk_mask(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor& keys = in.at(0);
  Tensor out = Tensor::empty(keys.shape(), TensorOptions(DType::kBool));
  const int64_t k = a.get_int("k");
  const bool magnitude = a.get_bool("magnitude");
  bool* o = out.data<bool>();
  if (keys.dtype() == DType::kF64) {
    topk_kernel(keys.data<double>(), keys.numel(), k, magnitude, o);
  } else {
    topk_kernel(keys.data<float>(), keys.numel(), k, magnitude, o);
  }
  return {out};
}

template <typename T>
void block_kernel(const T* x, int64_t cols, int64_t bh, int64_t bw, bool l1, int64_t nbr, int64_t nbc, double* out) {
  parallel_for(0, nbr * nbc, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t br = i / nbc, bc = i % nbc;
      out[i] = block_score(x + br * bh * cols + bc * bw, cols, bh, bw, l1);
    }
  });
}

std::vector<Tensor> sparsify_block_scores(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor& x = in.at(0);
  const int64_t bh = a.get_int("block_rows"), bw = a.get_int("block_cols");
  const bool l1 = a.get_bool("l1");
  const int64_t cols = x.size(1), nbr = x.size(0) / bh, nbc = cols / bw;
  Tensor out = Tensor::empty({nbr, nbc}, TensorOptions(DType::kF64));
  if (x.dtype() == DType::kF64) {
    block_kernel(x.data<double>(), cols, bh, bw, l1, nbr, nbc, out.data<double>());
  } else {
    block_kernel(x.data<float>(), cols, bh, bw, l1, nbr, nbc, out.data<double>());
  }
  return {out};
}

template <typename T>
void nm_kernel(const T* x, int64_t outer, int64_t size, int64_t inner, int64_t n, int64_t m, bool* out) {
  const int64_t gpo = size / m * inner;  // groups per outer index
  parallel_for(0, outer * gpo, 1024, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) {
      const int64_t o = g / gpo, r = g % gpo, base = o * size * inner + (r / inner) * m * inner + r % inner;
      nm_group(x + base, inner, n, m, out + base);
    }
  });
}

std::vector<Tensor> sparsify_nm_mask(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor& x = in.at(0);
  Tensor out = Tensor::empty(x.shape(), TensorOptions(DType::kBool));
  const int64_t n = a.get_int("n"), m = a.get_int("m");
  if (x.dtype() == DType::kF64) {
    nm_kernel(x.data<double>(), x.size(0), x.size(1), x.size(2), n, m, out.data<bool>());
  } else {
    nm_kernel(x.data<float>(), x.size(0), x.size(1), x.size(2), n, m, out.data<bool>());
  }
  return {out};
}

const KernelRegistrar kStream(op::kSparsifyStream, DeviceType::kCpu, {"dense"}, sparsify_stream);
const KernelRegistrar kTopk(op::kSparsifyTopkMask, DeviceType::kCpu, {"dense"}, sparsify_topk_mask);
const KernelRegistrar kBlock(op::kSparsifyBlockScores, DeviceType::kCpu, {"dense"}, sparsify_block_scores);
const KernelRegistrar kNm(op::kSparsifyNmMask, DeviceType::kCpu, {"dense"}, sparsify_nm_mask);

}  // namespace
}  // namespace coppice::sparsify
