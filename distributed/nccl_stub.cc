// distributed/nccl.h in a build without CUDA: nothing to run on.
#include "distributed/nccl.h"
#include "tensor/error.h"

namespace coppice {
namespace {

[[noreturn]] void no_cuda() { fail("nccl: this build has no CUDA (build with --define=cuda=1)"); }

}  // namespace

bool nccl_available() { return false; }

std::string nccl_unavailable_reason() { return "this build has no CUDA (build with --define=cuda=1)"; }

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv&, int, const NcclOptions&) { no_cuda(); }

std::string nccl_unique_id() { no_cuda(); }

std::unique_ptr<Communicator> make_nccl_communicator_from_id(const std::string&, int, int, int, const NcclOptions&) {
  no_cuda();
}

}  // namespace coppice
