// tensor/cuda/lazy without CUDA's libraries: COPPICE_CUDA_LIBRARY_DIR names
// a directory that does not exist, before anything loads, so every library
// is missing in this process. The loader says which library and where it
// looked; every forwarder returns its library's failure status instead of
// crashing, and the error-text functions explain. CPU only.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cusparse.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tensor/cuda/lazy/library.h"
#include "tests/util/temp_dir.h"

namespace coppice::cuda {
namespace {

// Whether `text` contains `part` (an AssertionResult, for EXPECT_TRUE).
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}

constexpr char kNowhere[] = "/nonexistent/coppice_cuda_library_missing_test";
// Before main, so before any forwarder's first call.
const bool kHidden = ::setenv("COPPICE_CUDA_LIBRARY_DIR", kNowhere, 1) == 0;

// Sets an environment variable for one scope (unset when `value` is null).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(CudaLibraryCandidates, FollowTheDocumentedOrder) {
  ScopedEnv only("COPPICE_CUDA_LIBRARY_DIR", nullptr);
  ScopedEnv home("CUDA_HOME", "/opt/a");
  ScopedEnv path("CUDA_PATH", "/opt/b");
  const std::vector<std::string> c = cuda_library_candidates("libx.so.1");
  ASSERT_GE(c.size(), 4u);
  EXPECT_EQ(c[0], "/opt/a/lib64/libx.so.1");
  EXPECT_EQ(c[1], "/opt/b/lib64/libx.so.1");
  EXPECT_EQ(c[2], "libx.so.1");  // the dynamic loader's own search
  EXPECT_EQ(c[3], "/usr/local/cuda/lib64/libx.so.1");
  for (size_t i = 4; i < c.size(); ++i) EXPECT_EQ(c[i].rfind("/usr/local/cuda-", 0), 0u) << c[i];
}

TEST(CudaLibraryCandidates, TheOverrideReplacesTheSearch) {
  ScopedEnv home("CUDA_HOME", "/opt/a");
  EXPECT_EQ(cuda_library_candidates("libx.so.1"), std::vector<std::string>{std::string(kNowhere) + "/libx.so.1"});
}

TEST(OpenCudaLibrary, NamesALibraryThatDoesNotExistAndWhereItLooked) {
  ScopedEnv only("COPPICE_CUDA_LIBRARY_DIR", nullptr);
  ScopedEnv home("CUDA_HOME", "/opt/coppice_no_cuda");
  const OpenedLibrary l = open_cuda_library("libcoppice_no_such_library.so.7");
  EXPECT_EQ(l.handle, nullptr);
  EXPECT_TRUE(contains(l.error, "libcoppice_no_such_library.so.7 could not be loaded"));
  EXPECT_TRUE(contains(l.error, "Looked in: /opt/coppice_no_cuda/lib64, the dynamic loader's search"));
  EXPECT_TRUE(contains(l.error, "/usr/local/cuda/lib64"));
  EXPECT_TRUE(contains(l.error, "CUDA_HOME"));
}

TEST(OpenCudaLibrary, ReportsAFileThatExistsButDoesNotLoad) {
  const std::string dir = testing::temp_dir("cuda_library");
  std::ofstream(dir + "/libbroken.so.1") << "not an ELF file";
  ScopedEnv only("COPPICE_CUDA_LIBRARY_DIR", dir.c_str());
  const OpenedLibrary l = open_cuda_library("libbroken.so.1");
  EXPECT_EQ(l.handle, nullptr);
  EXPECT_TRUE(contains(l.error, dir + "/libbroken.so.1"));  // dlopen's own message names the file
  EXPECT_TRUE(contains(l.error, "Looked in: " + dir));
}

TEST(OpenCudaLibrary, LoadsALibraryFromTheDirectoryNamed) {
  Dl_info info{};  // where this process's libm is: a library every machine has
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&std::cos)), &info), 0);
  const std::string file = info.dli_fname;
  const std::string dir = file.substr(0, file.rfind('/'));
  const std::string soname = file.substr(file.rfind('/') + 1);
  ScopedEnv only("COPPICE_CUDA_LIBRARY_DIR", dir.c_str());
  const OpenedLibrary l = open_cuda_library(soname);
  EXPECT_NE(l.handle, nullptr) << l.error;
  EXPECT_EQ(l.error, "");
  EXPECT_TRUE(contains(l.path, soname));
}

TEST(CudaLibraryLoadError, NamesEachMissingLibraryAndTheDirectory) {
  ASSERT_TRUE(kHidden);
  for (CudaLibrary lib : {CudaLibrary::kCublas, CudaLibrary::kCublasLt, CudaLibrary::kCusparse, CudaLibrary::kNccl}) {
    const std::string error = cuda_library_load_error(lib);
    EXPECT_TRUE(contains(error, std::string(cuda_library_soname(lib)) + " could not be loaded"));
    EXPECT_TRUE(contains(error, kNowhere));
    EXPECT_EQ(std::string(cuda_library_failure_text(lib)), error);
  }
}

TEST(Forwarders, ReturnCublasFailureWithoutTheLibrary) {
  cublasHandle_t handle = nullptr;
  EXPECT_EQ(cublasCreate(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(cublasSetStream(handle, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  const float one = 1.0f;
  EXPECT_EQ(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, 1, 0, nullptr, 1, 0,
                                      &one, nullptr, 1, 0, 1),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(contains(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED), "libcublas.so.13 could not be loaded"));
  EXPECT_TRUE(contains(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "libcublas.so.13"));
}

TEST(Forwarders, ReturnCublasLtFailureWithoutTheLibrary) {
  cublasLtHandle_t handle = nullptr;
  EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtMatmulDesc_t desc = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(contains(cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED), "libcublasLt.so.13"));
}

TEST(Forwarders, ReturnCusparseFailureWithoutTheLibrary) {
  cusparseHandle_t handle = nullptr;
  EXPECT_EQ(cusparseCreate(&handle), CUSPARSE_STATUS_NOT_INITIALIZED);
  cusparseSpGEMMDescr_t descr = nullptr;
  EXPECT_EQ(cusparseSpGEMM_createDescr(&descr), CUSPARSE_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(contains(cusparseGetErrorString(CUSPARSE_STATUS_NOT_INITIALIZED), "libcusparse.so.12"));
  EXPECT_TRUE(contains(cusparseGetErrorName(CUSPARSE_STATUS_NOT_INITIALIZED), "libcusparse.so.12"));
}

TEST(Forwarders, ReturnNcclFailureWithoutTheLibrary) {
  ncclUniqueId id{};
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSystemError);
  EXPECT_EQ(ncclGroupStart(), ncclSystemError);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSystemError);
  EXPECT_TRUE(contains(ncclGetErrorString(ncclSystemError), "libnccl.so.2 could not be loaded"));
  EXPECT_TRUE(contains(ncclGetLastError(nullptr), "libnccl.so.2"));
}

}  // namespace
}  // namespace coppice::cuda
