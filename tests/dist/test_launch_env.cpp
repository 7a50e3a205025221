// launch_info_from_env (dist/communicator.h): what a process learns from its launcher's environment, before any MPI
// call. Each case clears every variable the function reads, sets the launcher's ones and restores the caller's
// environment afterwards, so the cases also pass when this binary itself runs under mpirun or srun. The values of
// the Slurm and Open MPI cases are those seen on the CPU machine (Slurm 22.05.8, Open MPI 4.1.4, session 19):
//   srun --mpi=pmix -n 2            SLURM_STEP_ID=0 SLURM_PROCID=r SLURM_LOCALID=r SLURM_STEP_NUM_TASKS=2
//                                   SLURM_NTASKS=2 PMIX_RANK=r, no OMPI_COMM_WORLD_*
//   srun --mpi=pmi2 -n 2            the same Slurm variables, PMI_RANK=r PMI_SIZE=2
//   sbatch -n 2 (the batch shell)   SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=2, no SLURM_STEP_ID
//   srun -n 1 mpirun -np 2          OMPI_COMM_WORLD_RANK=r ... and on every rank SLURM_STEP_ID=0 SLURM_PROCID=0
//                                   SLURM_STEP_NUM_TASKS=1 (the step is mpirun's one task, not the ranks)
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

using namespace hlm;

namespace {

using Vars = std::vector<std::pair<const char*, const char*>>;

// Every variable launch_info_from_env reads.
constexpr const char* kLaunchVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_STEP_ID",
    "SLURM_PROCID",         "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",               "SLURM_LOCALID",
    "PMIX_RANK",            "PMI_RANK",             "PMI_SIZE"};

// Clears the launch variables for its lifetime and puts the caller's values back afterwards.
class LaunchEnvironment {
 public:
  LaunchEnvironment() {
    for (const char* name : kLaunchVariables) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v == nullptr ? std::nullopt : std::optional<std::string>(v));
      ::unsetenv(name);
    }
  }
  ~LaunchEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  LaunchEnvironment(const LaunchEnvironment&) = delete;
  LaunchEnvironment& operator=(const LaunchEnvironment&) = delete;

  // launch_info_from_env() with exactly `vars` set (the others unset).
  LaunchInfo with(const Vars& vars) {
    for (const char* name : kLaunchVariables) ::unsetenv(name);
    for (const auto& [name, value] : vars) ::setenv(name, value, 1);
    return launch_info_from_env();
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

void expect_launch(const LaunchInfo& got, bool launched, const std::string& launcher, int world_size, int rank,
                   int local_rank, const char* what) {
  EXPECT_EQ(got.launched, launched) << what;
  EXPECT_EQ(got.launcher, launcher) << what;
  EXPECT_EQ(got.world_size, world_size) << what;
  EXPECT_EQ(got.rank, rank) << what;
  EXPECT_EQ(got.local_rank, local_rank) << what;
}

}  // namespace

TEST(LaunchEnv, NothingSetIsOneProcess) {
  LaunchEnvironment env;
  expect_launch(env.with({}), false, "", 1, 0, 0, "no variable");
}

TEST(LaunchEnv, OpenMpi) {
  LaunchEnvironment env;
  expect_launch(env.with({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_RANK", "2"}}),
                true, "mpirun", 4, 2, 1, "mpirun");
}

// Inside a step: the step's task count, not the allocation's (a step may use fewer tasks than the job has).
// SLURM_STEP_ID=0 (the first step) counts: presence, not value. PMIX_RANK (--mpi=pmix) and PMI_RANK/PMI_SIZE
// (--mpi=pmi2) come along, and Slurm's own variables win over them.
TEST(LaunchEnv, SlurmStep) {
  LaunchEnvironment env;
  expect_launch(env.with({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"},
                          {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}, {"PMIX_RANK", "5"}}),
                true, "srun", 8, 5, 1, "srun --mpi=pmix, step of 8 tasks in a job of 16");
  expect_launch(env.with({{"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"},
                          {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}),
                true, "srun", 2, 1, 1, "srun --mpi=pmi2");
}

// Without SLURM_STEP_NUM_TASKS the job's SLURM_NTASKS gives the size; without either, 1.
TEST(LaunchEnv, SlurmTaskCountFallsBackToTheJobs) {
  LaunchEnvironment env;
  expect_launch(env.with({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"}}),
                true, "srun", 3, 2, 0, "SLURM_NTASKS only");
  expect_launch(env.with({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}}), true, "srun", 1, 0, 0, "no task count");
}

// The batch script's shell has SLURM_PROCID=0 but no SLURM_STEP_ID: it is not a rank, so a one-process run typed
// into a batch script stays one process (and does not start MPI).
TEST(LaunchEnv, SlurmBatchShellIsNotARank) {
  LaunchEnvironment env;
  expect_launch(env.with({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}}), false, "", 1, 0,
                0, "sbatch -n 2 shell");
  expect_launch(env.with({{"SLURM_STEP_ID", "0"}}), false, "", 1, 0, 0, "SLURM_STEP_ID without SLURM_PROCID");
}

TEST(LaunchEnv, PmixAndPmi) {
  LaunchEnvironment env;
  expect_launch(env.with({{"PMIX_RANK", "3"}}), true, "pmix", -1, 3, 0, "PMIx (no size in the environment)");
  expect_launch(env.with({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}}), true, "pmi", 4, 1, 0, "PMI");
  expect_launch(env.with({{"PMI_RANK", "1"}}), true, "pmi", -1, 1, 0, "PMI without PMI_SIZE");
  expect_launch(env.with({{"PMIX_RANK", "2"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "4"}}), true, "pmix", -1, 2, 0,
                "PMIx before PMI");
}

// Open MPI's variables win over Slurm's. mpirun inside a Slurm allocation starts its daemons as one srun step, so
// every rank inherits that step's SLURM_STEP_ID, SLURM_PROCID (the daemon's index: 0 on every rank of a node) and
// SLURM_STEP_NUM_TASKS (the number of daemons); only OMPI_COMM_WORLD_* tell the ranks apart (seen with
// `srun -n 1 mpirun -np 2`). Under `srun --mpi=pmix` Open MPI's variables are not in the environment (seen too), so
// the Slurm case applies there.
TEST(LaunchEnv, OpenMpiBeforeSlurm) {
  LaunchEnvironment env;
  expect_launch(env.with({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_RANK", "1"}, {"SLURM_STEP_ID", "0"},
                          {"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_NTASKS", "1"},
                          {"SLURM_LOCALID", "0"}}),
                true, "mpirun", 2, 1, 1, "srun -n 1 mpirun -np 2, rank 1");
}

// A value that is not a non-negative integer below 2^30 is an input error naming the variable and the value.
TEST(LaunchEnv, MalformedValuesAreInputErrorsNamingTheVariable) {
  LaunchEnvironment env;
  const std::vector<std::pair<Vars, std::string>> cases = {
      {{{"OMPI_COMM_WORLD_SIZE", "four"}}, "OMPI_COMM_WORLD_SIZE='four'"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1x"}}, "OMPI_COMM_WORLD_RANK='1x'"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}}, "OMPI_COMM_WORLD_LOCAL_RANK='-1'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1.5"}}, "SLURM_PROCID='1.5'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "2(x2)"}},
       "SLURM_STEP_NUM_TASKS='2(x2)'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "abc"}}, "SLURM_NTASKS='abc'"},
      {{{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "99999999999"}},
       "SLURM_LOCALID='99999999999'"},
      {{{"PMIX_RANK", "r0"}}, "PMIX_RANK='r0'"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "1e3"}}, "PMI_SIZE='1e3'"},
  };
  for (const auto& [vars, named] : cases) {
    try {
      const LaunchInfo info = env.with(vars);
      ADD_FAILURE() << named << ": accepted (launcher '" << info.launcher << "', rank " << info.rank << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
      EXPECT_NE(std::string(e.what()).find("environment variable " + named + " is not a rank or process count"),
                std::string::npos)
          << e.what();
    }
  }
}

// The caller's environment comes back: a variable set before is set again with its value, one unset stays unset.
TEST(LaunchEnv, TheCallersEnvironmentIsRestored) {
  const auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  };
  const auto put = [](const char* name, const std::optional<std::string>& v) {
    if (v) {
      ::setenv(name, v->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  };
  const std::optional<std::string> procid = get("SLURM_PROCID"), step = get("SLURM_STEP_ID");
  ::setenv("SLURM_PROCID", "7", 1);
  ::unsetenv("SLURM_STEP_ID");
  {
    LaunchEnvironment env;
    EXPECT_EQ(get("SLURM_PROCID"), std::nullopt);  // cleared inside
    expect_launch(env.with({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}}), true, "srun", 1, 1, 0, "inside");
  }
  EXPECT_EQ(get("SLURM_PROCID"), std::optional<std::string>("7"));
  EXPECT_EQ(get("SLURM_STEP_ID"), std::nullopt);
  put("SLURM_PROCID", procid);
  put("SLURM_STEP_ID", step);
}
