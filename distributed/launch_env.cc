#include "distributed/launch_env.h"

#include <charconv>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>

#include "distributed/job_token.h"
#include "tensor/error.h"

namespace coppice {
namespace {

struct Source {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* local_rank;  // nullptr: this launcher sets none
  const char* local_size;
};

constexpr Source kSources[] = {
    {Launcher::kEnv, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::kPmi, "PMI_RANK", "PMI_SIZE", nullptr, nullptr},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

absl::Status bad(const std::string& message) { return absl::InvalidArgumentError(str_cat("launch env: ", message)); }

using Getenv = std::function<const char*(const char*)>;

// The non-negative integer in variable `name`, or nullopt when it is unset.
absl::StatusOr<std::optional<int>> read_int(const Getenv& getenv, const char* name) {
  if (name == nullptr) return std::optional<int>();
  const char* text = getenv(name);
  if (text == nullptr) return std::optional<int>();
  const std::string s(text);
  long long value = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (s.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return bad(str_cat(name, "='", s, "' is not an integer"));
  }
  if (ec == std::errc::result_out_of_range || value > INT_MAX || value < INT_MIN) {
    return bad(str_cat(name, "=", s, " is out of range"));
  }
  if (value < 0) return bad(str_cat(name, "=", s, " is negative"));
  return std::optional<int>(static_cast<int>(value));
}

// `value` in quotes, cut to a readable length with its size when long.
std::string quoted(const std::string& value) {
  constexpr size_t kShown = 40;
  if (value.size() <= kShown) return str_cat("'", value, "'");
  return str_cat("'", value.substr(0, kShown), "...' (", value.size(), " bytes)");
}

// The job token: checked whenever set (never quoted), needed above one rank.
absl::Status read_job_token(const Getenv& getenv, LaunchEnv* env) {
  const char* token = getenv("COPPICE_JOB_TOKEN");
  if (token == nullptr) {
    if (env->world_size == 1) return absl::OkStatus();
    return bad(str_cat("COPPICE_JOB_TOKEN is not set (a world of ", env->world_size,
                       " ranks needs the same secret on every rank: tools/launch sets one; before srun or mpirun, "
                       "export COPPICE_JOB_TOKEN=$(openssl rand -hex 16))"));
  }
  if (*token == '\0') return bad("COPPICE_JOB_TOKEN is set but empty");
  if (std::string problem = job_token_problem(token); !problem.empty()) {
    return bad(str_cat("COPPICE_JOB_TOKEN ", problem));
  }
  env->job_token = token;
  return absl::OkStatus();
}

absl::Status read_bind(const Getenv& getenv, LaunchEnv* env) {
  const char* bind = getenv("COPPICE_RENDEZVOUS_BIND");
  if (bind == nullptr) return absl::OkStatus();
  const std::string value(bind);
  if (value != "addr" && value != "any") {
    return bad(str_cat("COPPICE_RENDEZVOUS_BIND=", quoted(value),
                       " is not 'addr' (listen on MASTER_ADDR's address, the default) or 'any' (every interface)"));
  }
  env->rendezvous_bind_any = value == "any";
  return absl::OkStatus();
}

struct Read {
  const Source* source;
  int rank;
  int size;
  std::optional<int> local_rank;
  std::optional<int> local_size;
};

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone: return "none";
    case Launcher::kEnv: return "env";
    case Launcher::kOpenMpi: return "openmpi";
    case Launcher::kPmi: return "pmi";
    case Launcher::kSlurm: return "slurm";
  }
  return "?";
}

absl::StatusOr<LaunchEnv> launch_env_from(const Getenv& getenv) {
  std::optional<Read> primary;
  for (const Source& source : kSources) {
    auto rank = read_int(getenv, source.rank);
    if (!rank.ok()) return rank.status();
    auto size = read_int(getenv, source.size);
    if (!size.ok()) return size.status();
    auto local_rank = read_int(getenv, source.local_rank);
    if (!local_rank.ok()) return local_rank.status();
    auto local_size = read_int(getenv, source.local_size);
    if (!local_size.ok()) return local_size.status();
    if (!rank->has_value() && !size->has_value()) continue;
    if (!rank->has_value()) return bad(str_cat(source.size, " is set but ", source.rank, " is not"));
    if (!size->has_value()) return bad(str_cat(source.rank, " is set but ", source.size, " is not"));
    const Read read{&source, **rank, **size, *local_rank, *local_size};
    if (!primary) {
      primary = read;
      continue;
    }
    // A source with another world size is an outer launcher; ignore it.
    if (read.size != primary->size) continue;
    if (read.rank != primary->rank) {
      return bad(str_cat(primary->source->rank, "=", primary->rank, " and ", source.rank, "=", read.rank,
                         " disagree (both launchers report a world of ", read.size, ")"));
    }
    if (primary->local_rank && read.local_rank && *primary->local_rank != *read.local_rank) {
      return bad(str_cat(primary->source->local_rank, "=", *primary->local_rank, " and ", source.local_rank, "=",
                         *read.local_rank, " disagree (both launchers report a world of ", read.size, ")"));
    }
  }

  LaunchEnv env;
  if (primary) {
    const Source& s = *primary->source;
    env.launcher = s.launcher;
    env.rank = primary->rank;
    env.world_size = primary->size;
    if (env.world_size < 1) return bad(str_cat(s.size, "=", env.world_size, " must be at least 1"));
    if (env.rank >= env.world_size) {
      return bad(str_cat(s.rank, "=", env.rank, " is not less than ", s.size, "=", env.world_size));
    }
    if (primary->local_size && !primary->local_rank) {
      return bad(str_cat(s.local_size, " is set but ", s.local_rank, " is not"));
    }
    if (!primary->local_rank) {
      env.local_rank = env.rank;
      env.local_world_size = env.world_size;
    } else if (!primary->local_size) {
      env.local_rank = *primary->local_rank;
      env.local_world_size = 0;
      if (env.local_rank >= env.world_size) {
        return bad(str_cat(s.local_rank, "=", env.local_rank, " is not less than ", s.size, "=", env.world_size));
      }
    } else {
      env.local_rank = *primary->local_rank;
      env.local_world_size = *primary->local_size;
      if (env.local_world_size < 1) {
        return bad(str_cat(s.local_size, "=", env.local_world_size, " must be at least 1"));
      }
      if (env.local_rank >= env.local_world_size) {
        return bad(
            str_cat(s.local_rank, "=", env.local_rank, " is not less than ", s.local_size, "=", env.local_world_size));
      }
      if (env.local_world_size > env.world_size) {
        return bad(str_cat(s.local_size, "=", env.local_world_size, " is larger than ", s.size, "=", env.world_size));
      }
    }
  }

  if (const char* port = getenv("MASTER_PORT")) {
    auto value = read_int(getenv, "MASTER_PORT");
    if (!value.ok()) return value.status();
    if (**value < 1 || **value > 65535) return bad(str_cat("MASTER_PORT=", port, " is outside 1..65535"));
    env.master_port = **value;
  } else if (env.world_size > 1) {
    return bad(str_cat("MASTER_PORT is not set (needed for a world of ", env.world_size, " ranks)"));
  }

  if (const char* addr = getenv("MASTER_ADDR")) {
    if (*addr == '\0') return bad("MASTER_ADDR is set but empty");
    env.master_addr = addr;
  } else if (const char* slurm = getenv("SLURM_LAUNCH_NODE_IPADDR"); slurm != nullptr && *slurm != '\0') {
    env.master_addr = slurm;
  } else if (env.world_size > 1) {
    if (env.local_world_size != env.world_size) {
      return bad(
          str_cat("MASTER_ADDR is not set (needed for a world of ", env.world_size, " ranks not all on this machine)"));
    }
    env.master_addr = "127.0.0.1";
  }
  if (absl::Status st = read_job_token(getenv, &env); !st.ok()) return st;
  if (absl::Status st = read_bind(getenv, &env); !st.ok()) return st;
  return env;
}

absl::StatusOr<LaunchEnv> launch_env() {
  return launch_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace coppice
