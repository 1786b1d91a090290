// How fast can the x slices of a BSR product y = x W^T even reach shared
// memory? Issue 17 asks which route takes 32x32 blocks past the
// one-block-row-per-thread-block L2 bound; this experiment measures that
// bound and the route most likely to move it, with the math left out, so the
// times are floors for any kernel that stages the same bytes. It is a
// measurement, not a product kernel: nothing in Coppice calls it.
//
// Each thread block owns one block row of W and one tile of BT rows of x
// (x [N, K] row-major, the layout a linear layer's input has) and, for every
// block of its row, receives the [BT, B] slice of x that block multiplies and
// the B x B block itself (TMA and bulk copies into a ring of stage slots, one
// mbarrier per position). Thread blocks form clusters of G block rows:
//   - G = 1: every slice is fetched once per block that uses its column, as
//     Coppice's mma.sync kernels do (sparse/cuda/bsr_mma.cu);
//   - G > 1: the cluster walks the union of its rows' columns and each slice
//     is fetched once for the cluster, by one member, and multicast to the
//     members whose row uses it (cp.async.bulk.tensor .multicast::cluster,
//     sm_90a); members wait only on their own positions.
// Rows are grouped into clusters in order, or greedily by shared columns.
//
// One JSON line per case: the x tiles fetched per batch tile (one per stored
// block for G = 1, the clusters' union sizes otherwise), the floor (median
// of 15 launches), dense_over_floor (cuBLAS's dense x W^T in the same call
// over the floor: the best speedup a kernel moving these bytes this way can
// reach), the clusters resident at once, the imbalance (a cluster lasts as
// long as its busiest member), and ideal_multicast_ms: the G = 1 floor
// scaled by the bytes a cluster still fetches, its imbalance and the SMs its
// clusters can occupy (what multicast could reach with no cost of its own).
//
// Build (here, no GPU needed) and run (lent H100, carry [".devbin_exp"]):
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a \
//     -o .devbin_exp/x_traffic_floor tools/device/experiments/x_traffic_floor.cu -lcublas
//   .devbin_exp/x_traffic_floor
#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kN = 4096;  // batch
constexpr int kK = 4096;  // in features
constexpr int kM = 4096;  // out features

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void bar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void bar_arrive_local(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void bar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// Arrives on the barrier at the same offset in cluster rank `cta`.
__device__ __forceinline__ void bar_arrive_remote(uint64_t* bar, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ void tma_x(void* dst, const CUtensorMap* map, int k, int n, uint64_t* bar, uint16_t mask,
                                      bool multicast) {
  if (multicast) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_u32(dst)),
        "l"(map), "r"(k), "r"(n), "r"(smem_u32(bar)), "h"(mask)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(dst)),
        "l"(map), "r"(k), "r"(n), "r"(smem_u32(bar))
        : "memory");
  }
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// One cluster's walk: positions [begin[c], begin[c+1]) of the union of its
// rows' columns, ascending. Per position p (q = p - begin within the
// cluster): its column, the members whose row uses it (mask), the member that
// fetches it (issuer, one of them), the stage slot it lands in (the same
// offset in every member: multicast writes one offset), and how many members
// must release their previous use of that slot first (releases). Per position
// and member ([positions, G]): the member's block there or -1, and the
// member's previous and next positions in the same slot (cluster-local, -1
// if none).
struct Schedule {
  const int* begin;
  const int* column;
  const uint16_t* mask;
  const uint8_t* issuer;
  const uint8_t* slot;
  const uint8_t* releases;
  const int* block_of;
  const int* prev_in_slot;
  const int* next_in_slot;
};

// Warp 0 lane 0 produces, warp 1 lane 0 consumes. Every barrier serves one
// position once (parity 0), so no member waits on a position it does not
// use and nothing has to run in lockstep:
//   - arrived[q]: the member's slice and block of position q have landed
//     (the member's producer expects the bytes);
//   - consumed[q]: the member's consumer is done with position q (its
//     producer waits on it before refilling that slot with its own block);
//   - released[q], in the issuer: the members that used q's slot before have
//     released it (each arrives once from its consumer).
template <int B, int BT>
__global__ void __launch_bounds__(64)
    x_floor(const __grid_constant__ CUtensorMap x_map, const __nv_bfloat16* __restrict__ w_blocks, Schedule sched,
            int G, int slots, int max_positions, int* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr uint32_t kXBytes = B * BT * 2;
  constexpr uint32_t kWBytes = B * B * 2;
  unsigned char* x_stage = smem;
  unsigned char* w_stage = smem + slots * kXBytes;
  uint64_t* arrived = reinterpret_cast<uint64_t*>(w_stage + slots * kWBytes);
  uint64_t* consumed = arrived + max_positions;
  uint64_t* released = consumed + max_positions;

  // This member's view of the cluster's walk, staged in shared memory so the
  // producer and consumer loops read no global memory.
  struct Step {
    int column, block, prev, next;
    uint16_t mask;
    uint8_t issuer, slot, releases;
  };
  Step* steps = reinterpret_cast<Step*>(released + max_positions);

  const uint32_t me = G > 1 ? cta_rank() : 0;
  const int cluster = blockIdx.x / G;
  const int n0 = blockIdx.y * BT;
  const int begin = sched.begin[cluster], count = sched.begin[cluster + 1] - begin;
  for (int q = threadIdx.x; q < count; q += blockDim.x) {
    const int p = begin + q;
    steps[q] = Step{sched.column[p],
                    sched.block_of[p * G + me],
                    sched.prev_in_slot[p * G + me],
                    sched.next_in_slot[p * G + me],
                    sched.mask[p],
                    sched.issuer[p],
                    sched.slot[p],
                    sched.releases[p]};
    bar_init(&arrived[q], 1);
    bar_init(&consumed[q], 1);
    bar_init(&released[q], max(1, static_cast<int>(sched.releases[p])));
  }
  if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  if (G > 1)
    cluster_sync();
  else
    __syncthreads();

  if (threadIdx.x == 0) {  // producer
    for (int q = 0; q < count; ++q) {
      const Step st = steps[q];
      if (st.block >= 0) {
        if (st.prev >= 0) bar_wait(&consumed[st.prev], 0);
        bar_arrive_expect(&arrived[q], kXBytes + kWBytes);
        bulk_copy(w_stage + st.slot * kWBytes, w_blocks + static_cast<size_t>(st.block) * B * B, kWBytes, &arrived[q]);
      }
      if (st.issuer == me) {
        if (st.releases > 0) bar_wait(&released[q], 0);
        // A slice only this member uses goes by the plain (unicast) copy.
        tma_x(x_stage + st.slot * kXBytes, &x_map, st.column * B, n0, &arrived[q], st.mask, st.mask != (1u << me));
      }
    }
  } else if (threadIdx.x == 32) {  // consumer
    int acc = 0;
    for (int q = 0; q < count; ++q) {
      const Step st = steps[q];
      if (st.block < 0) continue;
      bar_wait(&arrived[q], 0);
      acc += x_stage[st.slot * kXBytes + (q & 63)] + w_stage[st.slot * kWBytes];
      bar_arrive_local(&consumed[q]);
      if (st.next >= 0) {
        if (G > 1)
          bar_arrive_remote(&released[st.next], steps[st.next].issuer);
        else
          bar_arrive_local(&released[st.next]);
      }
    }
    if (acc == 12345) sink[0] = acc;
  }
  __syncwarp();
  if (G > 1) cluster_sync();
}

struct Pattern {
  int grid_rows, grid_cols;
  std::vector<std::vector<int>> cols;  // per block row, ascending
  int nnzb = 0;
};

Pattern random_pattern(int b, double density, uint32_t seed) {
  Pattern p;
  p.grid_rows = kM / b;
  p.grid_cols = kK / b;
  const int total = p.grid_rows * p.grid_cols;
  p.nnzb = static_cast<int>(total * density + 0.5);
  std::vector<int> all(total);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  p.cols.assign(p.grid_rows, {});
  for (int i = 0; i < p.nnzb; ++i) p.cols[all[i] / p.grid_cols].push_back(all[i] % p.grid_cols);
  for (auto& c : p.cols) std::sort(c.begin(), c.end());
  return p;
}

// Groups of G rows: in order, or greedily (each group starts from the first
// ungrouped row and adds the row sharing most columns with its union).
std::vector<std::vector<int>> group_rows(const Pattern& p, int G, bool greedy) {
  std::vector<std::vector<int>> groups;
  std::vector<char> used(p.grid_rows, 0);
  for (int r = 0; r < p.grid_rows; ++r) {
    if (used[r]) continue;
    std::vector<int> g{r};
    used[r] = 1;
    std::vector<char> in_union(p.grid_cols, 0);
    for (int c : p.cols[r]) in_union[c] = 1;
    while (static_cast<int>(g.size()) < G) {
      int best = -1, best_shared = -1;
      for (int t = r + 1; t < p.grid_rows; ++t) {
        if (used[t]) continue;
        if (!greedy) {
          best = t;
          break;
        }
        int shared = 0;
        for (int c : p.cols[t]) shared += in_union[c];
        if (shared > best_shared) best_shared = shared, best = t;
      }
      if (best < 0) break;
      g.push_back(best);
      used[best] = 1;
      for (int c : p.cols[best]) in_union[c] = 1;
    }
    groups.push_back(g);
  }
  return groups;
}

struct HostSchedule {
  std::vector<int> begin, column, block_of, prev_in_slot, next_in_slot;
  std::vector<uint16_t> mask;
  std::vector<uint8_t> issuer, slot, releases;
  long tiles = 0;
  int max_positions = 0;
};

HostSchedule build_schedule(const Pattern& p, const std::vector<std::vector<int>>& groups, int G, int slots) {
  std::vector<int> row_start(p.grid_rows + 1, 0);
  for (int r = 0; r < p.grid_rows; ++r) row_start[r + 1] = row_start[r] + static_cast<int>(p.cols[r].size());
  HostSchedule h;
  h.begin.push_back(0);
  int rr = 0;
  for (const auto& g : groups) {
    std::vector<int> uni;
    for (int r : g) uni.insert(uni.end(), p.cols[r].begin(), p.cols[r].end());
    std::sort(uni.begin(), uni.end());
    uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
    const int base = static_cast<int>(h.column.size());
    std::vector<std::vector<int>> last(G, std::vector<int>(slots, -1));     // cluster-local position
    std::vector<std::vector<int>> last_own(G, std::vector<int>(slots, 0));  // in the member's own positions
    std::vector<int> own_count(G, 0);
    for (int q = 0; q < static_cast<int>(uni.size()); ++q) {
      const int c = uni[q];
      uint16_t mask = 0;
      std::vector<int> members;
      for (int i = 0; i < G; ++i) {
        int block = -1;
        if (i < static_cast<int>(g.size())) {
          const auto& cs = p.cols[g[i]];
          auto it = std::lower_bound(cs.begin(), cs.end(), c);
          if (it != cs.end() && *it == c) block = row_start[g[i]] + static_cast<int>(it - cs.begin());
        }
        h.block_of.push_back(block);
        h.prev_in_slot.push_back(-1);
        h.next_in_slot.push_back(-1);
        if (block >= 0) mask |= 1u << i, members.push_back(i);
      }
      // The slot whose last use is furthest back in every member's own walk:
      // a member with a position in flight in each of its recent slots keeps
      // that many copies in flight.
      int best = 0, best_distance = -1;
      for (int s = 0; s < slots; ++s) {
        int distance = 1 << 30;
        for (int i : members) {
          if (last[i][s] >= 0) distance = std::min(distance, own_count[i] - last_own[i][s]);
        }
        if (distance > best_distance) best_distance = distance, best = s;
      }
      for (int i : members) last_own[i][best] = own_count[i]++;
      int releases = 0;
      for (int i : members) {
        const int prev = last[i][best];
        if (prev >= 0) {
          h.prev_in_slot[(base + q) * G + i] = prev;
          h.next_in_slot[(base + prev) * G + i] = q;
          ++releases;
        }
        last[i][best] = q;
      }
      h.column.push_back(c);
      h.mask.push_back(mask);
      h.issuer.push_back(static_cast<uint8_t>(members[rr++ % members.size()]));
      h.slot.push_back(static_cast<uint8_t>(best));
      h.releases.push_back(static_cast<uint8_t>(releases));
    }
    h.tiles += static_cast<long>(uni.size());
    h.max_positions = std::max(h.max_positions, static_cast<int>(uni.size()));
    h.begin.push_back(static_cast<int>(h.column.size()));
  }
  return h;
}

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK(cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(T)));
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (!fn || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "no cuTensorMapEncodeTiled\n");
    std::exit(1);
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

template <int B, int BT, int S>
float time_floor(const __nv_bfloat16* x, const __nv_bfloat16* w, const Pattern& p, int G, bool greedy, long* tiles,
                 int* resident, double* imbalance, int* sink) {
  CUtensorMap map;
  cuuint64_t dims[2] = {kK, kN};
  cuuint64_t strides[1] = {kK * 2};
  cuuint32_t box[2] = {B, BT};
  cuuint32_t estr[2] = {1, 1};
  static auto encode = encode_tiled();
  CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(x), dims, strides, box,
                      estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    std::exit(1);
  }
  auto groups = group_rows(p, G, greedy);
  HostSchedule h = build_schedule(p, groups, G, S);
  *tiles = h.tiles;
  // A cluster lasts as long as its busiest member: imbalance is the clusters'
  // summed G x (most blocks of a member) over the stored blocks.
  long busiest = 0;
  for (const auto& g : groups) {
    size_t most = 0;
    for (int r : g) most = std::max(most, p.cols[r].size());
    busiest += static_cast<long>(most) * G;
  }
  *imbalance = static_cast<double>(busiest) / p.nnzb;
  std::vector<void*> owned;
  auto dev = [&](const auto& v) {
    auto* d = to_device(v);
    owned.push_back(d);
    return d;
  };
  Schedule d{dev(h.begin),    dev(h.column),   dev(h.mask),         dev(h.issuer),      dev(h.slot),
             dev(h.releases), dev(h.block_of), dev(h.prev_in_slot), dev(h.next_in_slot)};
  const size_t smem = S * (B * BT * 2 + B * B * 2) + h.max_positions * (3 * 8 + 24);
  auto kernel = x_floor<B, BT>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  if (G > 8) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(groups.size() * G), kN / BT);
  cfg.blockDim = dim3(64);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = G;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters == 0) {
    std::fprintf(stderr, "block %d cluster %d: cannot be resident (%s)\n", B, G,
                 cudaGetErrorString(cudaGetLastError()));
    return -1.0f;
  }
  *resident = clusters;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int it = 0; it < 18; ++it) {
    CHECK(cudaEventRecord(a));
    CHECK(cudaLaunchKernelEx(&cfg, kernel, map, w, d, G, S, h.max_positions, sink));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (it >= 3) ms.push_back(t);
  }
  for (void* o : owned) cudaFree(o);
  return median(ms);
}

float time_dense(cublasHandle_t handle, const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y) {
  const float one = 1.0f, zero = 0.0f;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int it = 0; it < 18; ++it) {
    CHECK(cudaEventRecord(a));
    // y^T [M, N] = W [M, K] x^T: column-major y^T is row-major y [N, M].
    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, kM, kN, kK, &one, w, CUDA_R_16BF, kK, x, CUDA_R_16BF, kK, &zero, y,
                 CUDA_R_16BF, kM, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (it >= 3) ms.push_back(t);
  }
  return median(ms);
}

template <int B, int BT, int S>
void run_block(const __nv_bfloat16* x, const __nv_bfloat16* w, float dense, int sms, int* sink) {
  for (double sparsity : {0.90, 0.95}) {
    Pattern p = random_pattern(B, 1.0 - sparsity, 17);
    double unicast_ms = 0, unicast_bytes = 0;
    for (int G : {1, 2, 4, 8, 16}) {
      for (bool greedy : {false, true}) {
        if (G == 1 && greedy) continue;
        long tiles = 0;
        int resident = 0;
        double imbalance = 1;
        float t = time_floor<B, BT, S>(x, w, p, G, greedy, &tiles, &resident, &imbalance, sink);
        if (t < 0) continue;
        const double bytes =
            static_cast<double>(tiles) * B * BT * 2 * (kN / BT) + static_cast<double>(p.nnzb) * B * B * 2 * (kN / BT);
        if (G == 1) unicast_ms = t, unicast_bytes = bytes;
        // What a cluster could take at best: the unicast floor scaled by the
        // bytes it still fetches, by its busiest member and by the SMs that
        // clusters of G can occupy at once.
        const double ideal = unicast_ms * (bytes / unicast_bytes) * imbalance * sms / (resident * G);
        std::printf(
            "{\"block\": %d, \"sparsity\": %.2f, \"cluster\": %d, \"grouping\": \"%s\", \"batch_tile\": %d, "
            "\"stages\": %d, \"x_tiles\": %ld, \"stored_blocks\": %d, \"floor_ms\": %.4f, \"dense_ms\": %.4f, "
            "\"dense_over_floor\": %.2f, \"l2_read_TBps\": %.2f, \"resident_clusters\": %d, \"imbalance\": %.2f, "
            "\"ideal_multicast_ms\": %.4f, \"dense_over_ideal\": %.2f}\n",
            B, sparsity, G, greedy ? "greedy" : "in_order", BT, S, tiles, p.nnzb, t, dense, dense / t,
            bytes / (t * 1e-3) / 1e12, resident, imbalance, ideal, dense / ideal);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main() {
  __nv_bfloat16 *x, *w, *y;
  int* sink;
  CHECK(cudaMalloc(&x, sizeof(__nv_bfloat16) * kN * kK));
  CHECK(cudaMalloc(&w, sizeof(__nv_bfloat16) * kM * kK));
  CHECK(cudaMalloc(&y, sizeof(__nv_bfloat16) * kN * kM));
  CHECK(cudaMalloc(&sink, sizeof(int)));
  CHECK(cudaMemset(x, 0, sizeof(__nv_bfloat16) * kN * kK));
  CHECK(cudaMemset(w, 0, sizeof(__nv_bfloat16) * kM * kK));
  cublasHandle_t handle;
  cublasCreate(&handle);
  const float dense = time_dense(handle, x, w, y);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("{\"device\": \"%s\", \"sms\": %d, \"dense_bf16_ms\": %.4f}\n", prop.name, sms, dense);
  run_block<32, 256, 10>(x, w, dense, sms, sink);
  run_block<64, 256, 5>(x, w, dense, sms, sink);
  return 0;
}
