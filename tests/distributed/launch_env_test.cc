// launch_env_from with a fake environment: each launcher, precedence, and each error.
#include "distributed/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace coppice {
namespace {

using Vars = std::map<std::string, std::string>;

absl::StatusOr<LaunchEnv> from(const Vars& vars) {
  return launch_env_from([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// Every case's ranks carry a token unless the case says otherwise (the
// token's own cases are below).
const char kTestToken[] = "0123456789abcdef0123456789abcdef";

Vars with_token(Vars vars) {
  vars.emplace("COPPICE_JOB_TOKEN", kTestToken);
  return vars;
}

struct OkCase {
  const char* name;
  Vars vars;
  LaunchEnv want;
};

class LaunchEnvOk : public ::testing::TestWithParam<OkCase> {};

TEST_P(LaunchEnvOk, Reads) {
  const OkCase& c = GetParam();
  auto env = from(with_token(c.vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->job_token, kTestToken);
  EXPECT_FALSE(env->rendezvous_bind_any);
  EXPECT_EQ(env->rank, c.want.rank);
  EXPECT_EQ(env->world_size, c.want.world_size);
  EXPECT_EQ(env->local_rank, c.want.local_rank);
  EXPECT_EQ(env->local_world_size, c.want.local_world_size);
  EXPECT_EQ(env->master_addr, c.want.master_addr);
  EXPECT_EQ(env->master_port, c.want.master_port);
  EXPECT_STREQ(launcher_name(env->launcher), launcher_name(c.want.launcher));
}

LaunchEnv want(int rank, int size, int local_rank, int local_size, std::string addr, int port, Launcher l) {
  LaunchEnv e;
  e.rank = rank;
  e.world_size = size;
  e.local_rank = local_rank;
  e.local_world_size = local_size;
  e.master_addr = std::move(addr);
  e.master_port = port;
  e.launcher = l;
  return e;
}

INSTANTIATE_TEST_SUITE_P(
    All, LaunchEnvOk,
    ::testing::Values(
        OkCase{"nothing_set", {}, want(0, 1, 0, 1, "", 0, Launcher::kNone)},
        OkCase{"env_full",
               {{"RANK", "5"},
                {"WORLD_SIZE", "8"},
                {"LOCAL_RANK", "1"},
                {"LOCAL_WORLD_SIZE", "4"},
                {"MASTER_ADDR", "10.0.0.1"},
                {"MASTER_PORT", "29500"}},
               want(5, 8, 1, 4, "10.0.0.1", 29500, Launcher::kEnv)},
        OkCase{"env_one_rank_no_master", {{"RANK", "0"}, {"WORLD_SIZE", "1"}}, want(0, 1, 0, 1, "", 0, Launcher::kEnv)},
        OkCase{"env_no_local_all_local_default_addr",
               {{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_PORT", "1"}},
               want(2, 3, 2, 3, "127.0.0.1", 1, Launcher::kEnv)},
        OkCase{"openmpi",
               {{"OMPI_COMM_WORLD_RANK", "3"},
                {"OMPI_COMM_WORLD_SIZE", "4"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                {"MASTER_ADDR", "node0"},
                {"MASTER_PORT", "65535"}},
               want(3, 4, 1, 2, "node0", 65535, Launcher::kOpenMpi)},
        OkCase{"pmi",
               {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MASTER_PORT", "1234"}},
               want(1, 2, 1, 2, "127.0.0.1", 1234, Launcher::kPmi)},
        OkCase{"slurm",
               {{"SLURM_PROCID", "6"},
                {"SLURM_NTASKS", "8"},
                {"SLURM_LOCALID", "2"},
                {"SLURM_LAUNCH_NODE_IPADDR", "192.168.1.7"},
                {"MASTER_PORT", "29500"}},
               want(6, 8, 2, 0, "192.168.1.7", 29500, Launcher::kSlurm)},
        OkCase{"master_addr_beats_slurm",
               {{"SLURM_PROCID", "0"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_LOCALID", "0"},
                {"SLURM_LAUNCH_NODE_IPADDR", "192.168.1.7"},
                {"MASTER_ADDR", "head"},
                {"MASTER_PORT", "2"}},
               want(0, 2, 0, 0, "head", 2, Launcher::kSlurm)},
        OkCase{"env_and_slurm_agree",
               {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"MASTER_PORT", "3"}},
               want(1, 2, 1, 2, "127.0.0.1", 3, Launcher::kEnv)},
        OkCase{"srun_outer_launcher_ignored",  // srun starts one torchrun per node
               {{"RANK", "5"},
                {"WORLD_SIZE", "8"},
                {"LOCAL_RANK", "1"},
                {"LOCAL_WORLD_SIZE", "4"},
                {"SLURM_PROCID", "1"},
                {"SLURM_NTASKS", "2"},
                {"SLURM_LOCALID", "0"},
                {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"},
                {"MASTER_PORT", "29500"}},
               want(5, 8, 1, 4, "10.1.1.1", 29500, Launcher::kEnv)},
        OkCase{"openmpi_beats_pmi_and_slurm",
               {{"OMPI_COMM_WORLD_RANK", "0"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                {"PMI_RANK", "0"},
                {"PMI_SIZE", "2"},
                {"MASTER_PORT", "99"}},
               want(0, 2, 0, 2, "127.0.0.1", 99, Launcher::kOpenMpi)}),
    [](const ::testing::TestParamInfo<OkCase>& info) { return std::string(info.param.name); });

struct ErrCase {
  const char* name;
  Vars vars;
  std::string message;  // the whole message
};

class LaunchEnvErr : public ::testing::TestWithParam<ErrCase> {};

TEST_P(LaunchEnvErr, Fails) {
  const ErrCase& c = GetParam();
  auto env = from(c.vars);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(env.status().message()), c.message);
  EXPECT_EQ(std::string(env.status().message()).find('\n'), std::string::npos);
}

const Vars kTwo = {
    {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}, {"COPPICE_JOB_TOKEN", kTestToken}};

Vars without(Vars base, const std::string& name) {
  base.erase(name);
  return base;
}

Vars with(Vars base, const Vars& extra) {
  for (const auto& [k, v] : extra) base[k] = v;
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    All, LaunchEnvErr,
    ::testing::Values(
        ErrCase{"rank_not_integer", with(kTwo, {{"RANK", "one"}}), "launch env: RANK='one' is not an integer"},
        ErrCase{"rank_trailing_junk", with(kTwo, {{"RANK", "1x"}}), "launch env: RANK='1x' is not an integer"},
        ErrCase{"rank_empty", with(kTwo, {{"RANK", ""}}), "launch env: RANK='' is not an integer"},
        ErrCase{"size_not_integer", with(kTwo, {{"WORLD_SIZE", "2.0"}}),
                "launch env: WORLD_SIZE='2.0' is not an integer"},
        ErrCase{"rank_too_big", with(kTwo, {{"RANK", "99999999999"}}), "launch env: RANK=99999999999 is out of range"},
        ErrCase{"rank_negative", with(kTwo, {{"RANK", "-1"}}), "launch env: RANK=-1 is negative"},
        ErrCase{"slurm_negative", {{"SLURM_PROCID", "-2"}}, "launch env: SLURM_PROCID=-2 is negative"},
        ErrCase{"local_rank_negative", with(kTwo, {{"LOCAL_RANK", "-1"}}), "launch env: LOCAL_RANK=-1 is negative"},
        ErrCase{"size_zero", with(kTwo, {{"WORLD_SIZE", "0"}}), "launch env: WORLD_SIZE=0 must be at least 1"},
        ErrCase{"rank_ge_size", with(kTwo, {{"RANK", "2"}}), "launch env: RANK=2 is not less than WORLD_SIZE=2"},
        ErrCase{"ompi_rank_ge_size",
                {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                "launch env: OMPI_COMM_WORLD_RANK=4 is not less than OMPI_COMM_WORLD_SIZE=4"},
        ErrCase{"rank_without_size", {{"RANK", "0"}}, "launch env: RANK is set but WORLD_SIZE is not"},
        ErrCase{"size_without_rank", {{"PMI_SIZE", "2"}}, "launch env: PMI_SIZE is set but PMI_RANK is not"},
        ErrCase{"local_rank_ge_local_size", with(kTwo, {{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
                "launch env: LOCAL_RANK=2 is not less than LOCAL_WORLD_SIZE=2"},
        ErrCase{"local_size_zero", with(kTwo, {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}}),
                "launch env: LOCAL_WORLD_SIZE=0 must be at least 1"},
        ErrCase{"local_size_gt_size", with(kTwo, {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}}),
                "launch env: LOCAL_WORLD_SIZE=3 is larger than WORLD_SIZE=2"},
        ErrCase{"local_size_without_local_rank", with(kTwo, {{"LOCAL_WORLD_SIZE", "2"}}),
                "launch env: LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"},
        ErrCase{"slurm_local_rank_ge_size",
                {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "2"}, {"MASTER_PORT", "5"}},
                "launch env: SLURM_LOCALID=2 is not less than SLURM_NTASKS=2"},
        ErrCase{"port_zero", with(kTwo, {{"MASTER_PORT", "0"}}), "launch env: MASTER_PORT=0 is outside 1..65535"},
        ErrCase{"port_too_big", with(kTwo, {{"MASTER_PORT", "65536"}}),
                "launch env: MASTER_PORT=65536 is outside 1..65535"},
        ErrCase{"port_not_integer", with(kTwo, {{"MASTER_PORT", "http"}}),
                "launch env: MASTER_PORT='http' is not an integer"},
        ErrCase{"port_checked_for_one_rank", {{"MASTER_PORT", "-5"}}, "launch env: MASTER_PORT=-5 is negative"},
        ErrCase{"no_port",
                {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
                "launch env: MASTER_PORT is not set (needed for a world of 2 ranks)"},
        ErrCase{
            "no_addr_not_all_local",
            {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_PORT", "5"}},
            "launch env: MASTER_ADDR is not set (needed for a world of 4 ranks not all on this machine)"},
        ErrCase{"no_addr_slurm_local_size_unknown",
                {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"MASTER_PORT", "5"}},
                "launch env: MASTER_ADDR is not set (needed for a world of 2 ranks not all on this machine)"},
        ErrCase{"addr_empty", with(kTwo, {{"MASTER_ADDR", ""}}), "launch env: MASTER_ADDR is set but empty"},
        ErrCase{"rank_and_slurm_disagree", with(kTwo, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
                "launch env: RANK=0 and SLURM_PROCID=1 disagree (both launchers report a world of 2)"},
        ErrCase{"ompi_and_pmi_disagree",
                {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMI_RANK", "2"}, {"PMI_SIZE", "3"}},
                "launch env: OMPI_COMM_WORLD_RANK=1 and PMI_RANK=2 disagree (both launchers report a world of 3)"},
        ErrCase{"token_missing", without(kTwo, "COPPICE_JOB_TOKEN"),
                "launch env: COPPICE_JOB_TOKEN is not set (a world of 2 ranks needs the same secret on every rank: "
                "tools/launch sets one; before srun or mpirun, export COPPICE_JOB_TOKEN=$(openssl rand -hex 16))"},
        ErrCase{"token_empty", with(kTwo, {{"COPPICE_JOB_TOKEN", ""}}),
                "launch env: COPPICE_JOB_TOKEN is set but empty"},
        ErrCase{"token_short", with(kTwo, {{"COPPICE_JOB_TOKEN", "hunter2"}}),
                "launch env: COPPICE_JOB_TOKEN has 7 characters, fewer than 16"},
        ErrCase{"token_long", with(kTwo, {{"COPPICE_JOB_TOKEN", std::string(300, 'z')}}),
                "launch env: COPPICE_JOB_TOKEN has 300 characters, more than 256"},
        ErrCase{"token_with_space", with(kTwo, {{"COPPICE_JOB_TOKEN", "correct horse battery staple"}}),
                "launch env: COPPICE_JOB_TOKEN holds a space, a control character or a non-ASCII byte (use letters, "
                "digits and punctuation, e.g. the output of `openssl rand -hex 16`)"},
        ErrCase{"token_checked_for_one_rank",
                {{"COPPICE_JOB_TOKEN", "short"}},
                "launch env: COPPICE_JOB_TOKEN has 5 characters, fewer than 16"},
        ErrCase{"bind_unknown", with(kTwo, {{"COPPICE_RENDEZVOUS_BIND", "all"}}),
                "launch env: COPPICE_RENDEZVOUS_BIND='all' is not 'addr' (listen on MASTER_ADDR's address, the "
                "default) or 'any' (every interface)"},
        ErrCase{"bind_long_value_shortened", with(kTwo, {{"COPPICE_RENDEZVOUS_BIND", std::string(1000, 'q')}}),
                "launch env: COPPICE_RENDEZVOUS_BIND='" + std::string(40, 'q') +
                    "...' (1000 bytes) is not 'addr' (listen on MASTER_ADDR's address, the default) or 'any' (every "
                    "interface)"},
        ErrCase{"local_ranks_disagree",
                with(kTwo, {{"LOCAL_RANK", "0"},
                            {"LOCAL_WORLD_SIZE", "2"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "2"},
                            {"SLURM_LOCALID", "1"}}),
                "launch env: LOCAL_RANK=0 and SLURM_LOCALID=1 disagree (both launchers report a world of 2)"}),
    [](const ::testing::TestParamInfo<ErrCase>& info) { return std::string(info.param.name); });

TEST(LaunchEnv, TokenAndBind) {
  auto env = from(with(kTwo, {{"COPPICE_RENDEZVOUS_BIND", "any"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->job_token, kTestToken);
  EXPECT_TRUE(env->rendezvous_bind_any);
  env = from(with(kTwo, {{"COPPICE_RENDEZVOUS_BIND", "addr"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->rendezvous_bind_any);
  env = from({});  // one process: no token needed
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->job_token, "");
}

TEST(LaunchEnv, ABadTokenIsNeverQuoted) {
  for (const std::string& token :
       {std::string("tiny-secret"), std::string("secret with spaces in it"), std::string(400, 's')}) {
    auto env = from(with(kTwo, {{"COPPICE_JOB_TOKEN", token}}));
    ASSERT_FALSE(env.ok());
    EXPECT_EQ(std::string(env.status().message()).find(token), std::string::npos) << env.status();
  }
}

TEST(LaunchEnv, LauncherNames) {
  EXPECT_STREQ(launcher_name(Launcher::kNone), "none");
  EXPECT_STREQ(launcher_name(Launcher::kEnv), "env");
  EXPECT_STREQ(launcher_name(Launcher::kOpenMpi), "openmpi");
  EXPECT_STREQ(launcher_name(Launcher::kPmi), "pmi");
  EXPECT_STREQ(launcher_name(Launcher::kSlurm), "slurm");
}

}  // namespace
}  // namespace coppice
