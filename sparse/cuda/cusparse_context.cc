// cuSPARSE handles and the LRU plan cache (cusparse_context.h).
#include <cuda_runtime_api.h>

#include <array>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>

#include "sparse/cuda/cusparse_internal.h"
#include "tensor/backend.h"
#include "tensor/cuda/lazy/library.h"
#include "tensor/cuda/side_stream.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace coppice::sparse_cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Entry {
  std::string key;
  std::weak_ptr<TensorImpl> anchor;  // the pattern's (pattern_anchor)
  std::unique_ptr<Plan> plan;
};

struct Cache {
  // Most recently used first.
  std::list<Entry> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> by_key;
  PlanCacheStats stats;
};

// Never destroyed: plans hold CUDA resources that must not be released after
// the runtime has shut down at exit.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

void check_cuda_operand_pair(const std::vector<Tensor>& in, std::string_view op) {
  COPPICE_CHECK(in.size() == 2, op, ": expected 2 inputs, got ", in.size());
  for (const Tensor& t : in) {
    COPPICE_CHECK(t.dim() == 2, op, ": operands must be 2-D, got shape ", shape_to_string(t.shape()));
    COPPICE_CHECK(t.device().is_cuda() && t.device() == in[0].device(), op,
                  ": CUDA kernel needs both operands on one CUDA device, got ", in[0].device().to_string(), " and ",
                  t.device().to_string());
  }
  COPPICE_CHECK(in[0].dtype() == in[1].dtype(), op, ": operands must share one dtype, got ", dtype_name(in[0].dtype()),
                " and ", dtype_name(in[1].dtype()));
  COPPICE_CHECK(is_floating(in[0].dtype()), op, ": ", dtype_name(in[0].dtype()),
                " operands are not supported (f32, f64, bf16, f16)");
}

void check_cusparse(cusparseStatus_t status, std::string_view op, std::string_view what) {
  if (status == CUSPARSE_STATUS_SUCCESS) return;
  // libcusparse.so.12 is found at run time (tensor/cuda/lazy/library.h):
  // missing, it says so.
  if (status == CUSPARSE_STATUS_NOT_INITIALIZED) {
    const std::string missing = cuda::cuda_library_load_error(cuda::CudaLibrary::kCusparse);
    if (!missing.empty()) fail(op, ": ", missing, " (in ", what, ")");
  }
  fail(op, ": cuSPARSE error ", cusparseGetErrorName(status), ": ", cusparseGetErrorString(status), " (in ", what, ")");
}

std::mutex& cusparse_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// Two handles a device, as gemm.cc's cuBLAS ones: the side stream's
// (tensor/cuda/side_stream.h), whose work may run beside the other
// stream's, and every other stream's.
cusparseHandle_t handle_for(int device) {
  COPPICE_CHECK(device >= 0 && device < kMaxDevices, "cusparse: device index ", device, " out of range");
  static auto* handles = new std::array<std::array<cusparseHandle_t, 2>, kMaxDevices>();
  // Every call: the stream is the graph-capture stream while capturing (stream.h).
  const cudaStream_t stream = cuda::current_stream(device);
  cusparseHandle_t& h = (*handles)[static_cast<size_t>(device)][cuda::is_side_stream(device, stream) ? 1 : 0];
  if (h == nullptr) {
    cusparseHandle_t handle = nullptr;
    check_cusparse(cusparseCreate(&handle), "cusparse", "cusparseCreate");
    h = handle;
  }
  check_cusparse(cusparseSetStream(h, stream), "cusparse", "cusparseSetStream");
  return h;
}

Plan::~Plan() {
  // Statuses are ignored: a destructor must not throw, and a failure here
  // leaks at most one descriptor.
  int previous = -1;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device && cudaSetDevice(device) == cudaSuccess;
  if (sparse != nullptr) cusparseDestroySpMat(sparse);
  for (cusparseDnMatDescr_t d : dense) {
    if (d != nullptr) cusparseDestroyDnMat(d);
  }
  if (workspace != nullptr) allocator_for(Device::cuda(device)).deallocate(workspace, workspace_bytes);
  if (switched) cudaSetDevice(previous);
}

void Plan::allocate_workspace(size_t bytes) {
  workspace = allocator_for(Device::cuda(device)).allocate(bytes);
  workspace_bytes = bytes;
}

Plan& find_or_build(const std::string& key, int device, const Tensor& anchor, const std::function<void(Plan&)>& build) {
  Cache& c = cache();
  auto it = c.by_key.find(key);
  if (it != c.by_key.end()) {
    ++c.stats.hits;
    c.lru.splice(c.lru.begin(), c.lru, it->second);
    return *c.lru.front().plan;
  }
  auto plan = std::make_unique<Plan>();
  plan->device = device;
  build(*plan);  // a throw destroys the half-built plan
  ++c.stats.misses;
  for (auto e = c.lru.begin(); e != c.lru.end();) {  // patterns no tensor holds any more
    if (!e->anchor.expired()) {
      ++e;
      continue;
    }
    c.by_key.erase(e->key);
    e = c.lru.erase(e);
    ++c.stats.dropped;
  }
  while (c.lru.size() >= kPlanCacheCapacity) {
    c.by_key.erase(c.lru.back().key);
    c.lru.pop_back();
    ++c.stats.evictions;
  }
  c.lru.push_front({key, anchor.impl_ptr(), std::move(plan)});
  c.by_key[key] = c.lru.begin();
  return *c.lru.front().plan;
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF64: return CUDA_R_64F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: fail("cusparse: ", dtype_name(dtype), " values are not supported (f32, f64, bf16, f16)");
  }
}

PlanCacheStats plan_cache_stats() {
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  PlanCacheStats s = cache().stats;
  s.size = static_cast<int64_t>(cache().lru.size());
  return s;
}

void reset_plan_cache_stats() {
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cache().stats = PlanCacheStats{};
}

void clear_plan_cache() {
  std::lock_guard<std::mutex> lock(cusparse_mutex());
  cache().by_key.clear();
  cache().lru.clear();
}

}  // namespace coppice::sparse_cuda
