// Finding and loading CUDA's libraries at run time (library.h).
#include "tensor/cuda/lazy/library.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace coppice::cuda {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// `name` in `dir`.
std::string in_dir(const std::string& dir, const std::string& name) {
  std::string path = dir;
  path += '/';
  path += name;
  return path;
}

// /usr/local/cuda-*/lib64, newest name first (as _libraries.py sorts them).
std::vector<std::string> versioned_toolkits() {
  std::vector<std::string> dirs;
  glob_t g{};
  if (glob("/usr/local/cuda-*/lib64", GLOB_ONLYDIR, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(dirs.rbegin(), dirs.rend());
  return dirs;
}

// The loaded file's path, as the dynamic loader records it.
std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

// What the error message lists as searched: each directory tried, and the
// dynamic loader's search where the bare soname was tried.
std::string looked_in(const std::vector<std::string>& candidates) {
  std::string s;
  for (const std::string& c : candidates) {
    if (!s.empty()) s += ", ";
    const size_t slash = c.rfind('/');
    s += slash == std::string::npos ? std::string("the dynamic loader's search (LD_LIBRARY_PATH, ldconfig's cache)")
                                    : c.substr(0, slash);
  }
  return s;
}

// One library's outcome, fixed at its first use, and the functions asked of
// it that it lacked (a library older than the build's headers).
struct Loaded {
  OpenedLibrary opened;
  std::string failure_text;  // for cuda_library_failure_text: stable for the process
  std::mutex mu;             // guards `missing`
  std::string missing;
};

Loaded* make_loaded(CudaLibrary library) {
  auto* l = new Loaded();
  l->opened = open_cuda_library(cuda_library_soname(library));
  l->failure_text = l->opened.handle == nullptr
                        ? l->opened.error
                        : std::string(cuda_library_soname(library)) + " (" + l->opened.path +
                              ") lacks a function Coppice calls: it is older than the CUDA the build used";
  return l;
}

// One function-local static per library: each is loaded on its own first use
// (thread-safe), and never unloaded.
template <CudaLibrary L>
Loaded& loaded() {
  static Loaded* l = make_loaded(L);
  return *l;
}

Loaded& loaded(CudaLibrary library) {
  switch (library) {
    case CudaLibrary::kCublas: return loaded<CudaLibrary::kCublas>();
    case CudaLibrary::kCublasLt: return loaded<CudaLibrary::kCublasLt>();
    case CudaLibrary::kCusparse: return loaded<CudaLibrary::kCusparse>();
    case CudaLibrary::kNccl: return loaded<CudaLibrary::kNccl>();
  }
  std::abort();  // unreachable: every enumerator is handled
}

}  // namespace

const char* cuda_library_soname(CudaLibrary library) {
  switch (library) {
    case CudaLibrary::kCublas: return "libcublas.so.13";
    case CudaLibrary::kCublasLt: return "libcublasLt.so.13";
    case CudaLibrary::kCusparse: return "libcusparse.so.12";
    case CudaLibrary::kNccl: return "libnccl.so.2";
  }
  return "unknown CUDA library";
}

std::vector<std::string> cuda_library_candidates(const std::string& soname) {
  const std::string only = env("COPPICE_CUDA_LIBRARY_DIR");
  if (!only.empty()) return {in_dir(only, soname)};
  std::vector<std::string> c;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const std::string dir = env(var);
    if (!dir.empty()) c.push_back(in_dir(dir, "lib64/" + soname));
  }
  c.push_back(soname);
  c.push_back("/usr/local/cuda/lib64/" + soname);
  for (const std::string& dir : versioned_toolkits()) c.push_back(in_dir(dir, soname));
  return c;
}

OpenedLibrary open_cuda_library(const std::string& soname) {
  const std::vector<std::string> candidates = cuda_library_candidates(soname);
  std::string first_error;  // from a file that exists but would not load (a missing dependency, say)
  std::string search_error;
  for (const std::string& c : candidates) {
    const bool is_path = c.find('/') != std::string::npos;
    if (is_path && access(c.c_str(), F_OK) != 0) continue;
    // RTLD_LOCAL: the handle is only used through dlsym, and NCCL's symbols
    // carry no version, so a global NCCL could bind another library's calls
    // (PyTorch's own NCCL, loaded later) to this one.
    void* handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return {handle, loaded_path(handle, c), ""};
    const char* why = dlerror();
    std::string& slot = is_path ? first_error : search_error;
    if (slot.empty()) slot = why != nullptr ? why : "dlopen failed";
  }
  std::string why = !first_error.empty() ? first_error : search_error;
  if (why.empty()) why = "no such file";
  return {nullptr, "",
          soname + " could not be loaded (" + why + "). Looked in: " + looked_in(candidates) +
              ". GPU work needs CUDA 13's libraries: install them, or set CUDA_HOME (its lib64) or LD_LIBRARY_PATH "
              "to where they are"};
}

void* cuda_library_symbol(CudaLibrary library, const char* name) {
  Loaded& l = loaded(library);
  if (l.opened.handle == nullptr) return nullptr;
  void* f = dlsym(l.opened.handle, name);
  if (f == nullptr) {
    std::lock_guard<std::mutex> lock(l.mu);
    l.missing += l.missing.empty() ? name : std::string(", ") + name;
  }
  return f;
}

std::string cuda_library_load_error(CudaLibrary library) {
  Loaded& l = loaded(library);
  if (l.opened.handle == nullptr) return l.opened.error;
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.missing.empty()) return "";
  return std::string(cuda_library_soname(library)) + " (" + l.opened.path + ") lacks " + l.missing +
         ": it is older than the CUDA the build used";
}

const char* cuda_library_failure_text(CudaLibrary library) { return loaded(library).failure_text.c_str(); }

}  // namespace coppice::cuda
