// Finds CUDA's libraries by name at run time, the first time GPU work calls
// into one, so that a CUDA build starts and runs CPU work on a machine
// without them. The binaries link no cuBLAS, cuBLASLt, cuSPARSE or NCCL:
// cublas.cc, cublas_lt.cc, cusparse.cc and nccl.cc here define each function
// of those libraries that Coppice calls, and each definition forwards to the
// real one, resolved here on its first call. A library that cannot be loaded
// makes its functions return the library's own failure status
// (CUBLAS_STATUS_NOT_INITIALIZED, CUSPARSE_STATUS_NOT_INITIALIZED,
// ncclSystemError) and its error-text functions return
// cuda_library_failure_text, so the callers' existing error paths report it.
//
// Where a library is looked for, in order (python/coppice/_libraries.py
// documents the same order for the wheel):
//   1. $CUDA_HOME/lib64, $CUDA_PATH/lib64 (when set);
//   2. the dynamic loader's own search for the soname: LD_LIBRARY_PATH, then
//      ldconfig's cache (where Debian's libnccl2 puts libnccl.so.2);
//   3. /usr/local/cuda/lib64, then /usr/local/cuda-*/lib64, newest name first.
// COPPICE_CUDA_LIBRARY_DIR, when set, replaces that whole search with its one
// directory: tests point it at an empty one to run as if CUDA's libraries
// were missing.
#pragma once

#include <string>
#include <vector>

namespace coppice::cuda {

enum class CudaLibrary { kCublas, kCublasLt, kCusparse, kNccl };

// The soname the build's headers go with: "libcublas.so.13", ...
const char* cuda_library_soname(CudaLibrary library);

// The places tried for `soname`, in the order above: paths, and the bare
// soname for the dynamic loader's own search. Reads the environment each call.
std::vector<std::string> cuda_library_candidates(const std::string& soname);

struct OpenedLibrary {
  void* handle = nullptr;  // from dlopen; nullptr when nothing could be loaded
  std::string path;        // the file loaded
  std::string error;       // why not: the soname, where it looked, dlopen's message
};

// Loads `soname` from the first candidate that has it (RTLD_NOW | RTLD_LOCAL;
// never closed). The building block of the functions below, exposed for tests.
OpenedLibrary open_cuda_library(const std::string& soname);

// Loads `library` once per process (later calls return the first outcome)
// and returns the address of its function `name`, or nullptr when the
// library or the function is missing (cuda_library_load_error says which).
void* cuda_library_symbol(CudaLibrary library, const char* name);

// "" when `library` loads and has every function asked of it so far; else why
// not, naming the soname and where it was looked for, e.g. "libcublas.so.13
// could not be loaded (...). Looked in: ...". Loads the library if no call has
// yet: an empty answer means GPU work can use it.
std::string cuda_library_load_error(CudaLibrary library);

// cuda_library_load_error as a C string that lives as long as the process,
// for the error-text functions of an unloadable library (which return const
// char*). Never empty.
const char* cuda_library_failure_text(CudaLibrary library);

// The real function behind a forwarder: `real` from cuda_library_symbol,
// called with the forwarder's own arguments (so its type is the forwarder's,
// which the compiler has checked against the library's header), or `failure`
// when it is missing.
template <typename R, typename... Args>
R forward(void* real, R failure, Args... args) {
  if (real == nullptr) return failure;
  return reinterpret_cast<R (*)(Args...)>(real)(args...);
}

}  // namespace coppice::cuda
