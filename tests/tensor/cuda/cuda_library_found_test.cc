// tensor/cuda/lazy with CUDA's libraries where the build machine has them
// (the normal search; skipped, saying why, where they are not): every
// function the forwarders define resolves in the installed library, and a
// forwarder returns the real library's answer. CPU only: the error-text
// functions need no GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cusparse.h>
#include <nccl.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tensor/cuda/lazy/library.h"

namespace coppice::cuda {
namespace {

struct Forwarders {
  const char* source;  // in the runfiles: the file that defines them
  CudaLibrary library;
};

class CudaLibraryFound : public ::testing::TestWithParam<Forwarders> {};

// Each function the source defines (a definition begins a line with the
// return type), looked up in the real library.
TEST_P(CudaLibraryFound, HasEveryFunctionTheForwardersDefine) {
  const Forwarders f = GetParam();
  const std::string why = cuda_library_load_error(f.library);
  if (!why.empty()) GTEST_SKIP() << why;
  std::ifstream in(f.source);
  ASSERT_TRUE(in) << "cannot read " << f.source;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const std::regex definition(R"(\n(?:cublasStatus_t|cusparseStatus_t|ncclResult_t|const char\*) (\w+)\()");
  int count = 0;
  for (std::sregex_iterator it(s.begin(), s.end(), definition), end; it != end; ++it, ++count) {
    const std::string name = (*it)[1];
    EXPECT_NE(cuda_library_symbol(f.library, name.c_str()), nullptr) << name << " is not in " << f.source;
  }
  EXPECT_GE(count, 8) << "too few definitions found in " << f.source;
  EXPECT_EQ(cuda_library_load_error(f.library), "");
}

INSTANTIATE_TEST_SUITE_P(Each, CudaLibraryFound,
                         ::testing::Values(Forwarders{"tensor/cuda/lazy/cublas.cc", CudaLibrary::kCublas},
                                           Forwarders{"tensor/cuda/lazy/cublas_lt.cc", CudaLibrary::kCublasLt},
                                           Forwarders{"tensor/cuda/lazy/cusparse.cc", CudaLibrary::kCusparse},
                                           Forwarders{"tensor/cuda/lazy/nccl.cc", CudaLibrary::kNccl}));

TEST(Forwarders, ReturnTheRealLibrarysAnswers) {
  for (CudaLibrary lib : {CudaLibrary::kCublas, CudaLibrary::kCublasLt, CudaLibrary::kCusparse, CudaLibrary::kNccl}) {
    const std::string why = cuda_library_load_error(lib);
    if (!why.empty()) GTEST_SKIP() << why;
  }
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cusparseGetErrorName(CUSPARSE_STATUS_INVALID_VALUE), "CUSPARSE_STATUS_INVALID_VALUE");
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
}

}  // namespace
}  // namespace coppice::cuda
