// Where this process sits in a multi-process job, read from the environment.
//
// Sources, in this order of precedence (the first one present is `launcher`):
//   kEnv      RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun, tools/launch)
//   kOpenMpi  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (Open MPI's mpirun)
//   kPmi      PMI_RANK, PMI_SIZE (MPICH / Intel MPI's Hydra mpirun)
//   kSlurm    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (srun)
// None present: a single process, rank 0 of 1 (launcher kNone).
//
// Two sources that report the same world size describe the same job and must
// agree on the rank (and on the local rank where both give one); otherwise the
// call fails. A lower source with a different world size is taken as an outer
// launcher (srun starting one torchrun per node) and ignored.
//
// When the launcher names no local rank (PMI, or RANK without LOCAL_RANK) all
// ranks are taken to be on this machine: local_rank = rank, local_world_size =
// world_size. When it names a local rank but not the local world size (srun),
// local_world_size is 0, meaning unknown.
//
// MASTER_ADDR falls back to SLURM_LAUNCH_NODE_IPADDR, then, when the world
// size is above 1 and every rank is local (local_world_size == world_size), to
// 127.0.0.1. MASTER_PORT has no fallback: a world of more than one rank needs it.
// With a world of one, master_addr is "" and master_port 0 unless they are set.
//
// COPPICE_JOB_TOKEN is the job's secret, presented by every rank at the
// rendezvous (distributed/job_token.h: 16 to 256 printable ASCII characters,
// no spaces). A world of more than one rank needs it, the same on every rank:
// tools/launch makes one; under srun or mpirun, export it before starting
// them (`export COPPICE_JOB_TOKEN=$(openssl rand -hex 16)`: both pass the
// environment on). It is checked whenever it is set, and never quoted in an
// error.
//
// COPPICE_RENDEZVOUS_BIND says where rank 0 listens: `addr` (the default:
// MASTER_ADDR's own address) or `any` (every interface, for rank 0 behind NAT
// or in a container whose published address is not its own).
//
// Every error is one line naming the variable, e.g.
//   "launch env: RANK=4 is not less than WORLD_SIZE=4".
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppice {

enum class Launcher { kNone, kEnv, kOpenMpi, kPmi, kSlurm };

// "none", "env", "openmpi", "pmi", "slurm".
const char* launcher_name(Launcher launcher);

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;          // 0: the launcher did not say
  std::string master_addr;           // "" only when world_size == 1 and none was set
  int master_port = 0;               // 0 only when world_size == 1 and none was set
  std::string job_token;             // "" only when world_size == 1 and none was set
  bool rendezvous_bind_any = false;  // COPPICE_RENDEZVOUS_BIND=any
  Launcher launcher = Launcher::kNone;
};

// Reads the variables through `getenv` (which returns nullptr for unset ones).
absl::StatusOr<LaunchEnv> launch_env_from(const std::function<const char*(const char*)>& getenv);

// launch_env_from(std::getenv).
absl::StatusOr<LaunchEnv> launch_env();

}  // namespace coppice
