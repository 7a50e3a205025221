// Crash safety of `hybridlm pretrain` and `hybridlm distill`, tested by killing real processes (issue #19, item 3;
// docs/reliability.md):
// - SIGKILL at a random moment (uniform over the first 80% of an uninterrupted run's wall time: startup, steps,
//   validation, checkpoints written every step, model/ and test.json), or at a chosen point inside a checkpoint write
//   (HYBRIDLM_FAULT, train/fault_inject.h); then `--resume` (or, when no checkpoint existed yet, a fresh start into
//   the emptied --out) until the run completes: the final weights are bit-identical to the uninterrupted run's and
//   test.json holds the same numbers;
// - a checkpoint write that fails (RLIMIT_FSIZE below the optimizer file's size, SIGXFSZ ignored: write() gets
//   EFBIG, as on a full disk) exits non-zero naming the file, leaves the previous checkpoint intact (its manifest
//   verifies) and resumable to the same final weights;
// - a second process given a busy --out (fresh or --resume) refuses with exit 2 while the first, frozen by SIGSTOP
//   so the overlap is certain, then finishes unharmed with the same weights;
// - HYBRIDLM_FAULT itself: a malformed value is an input error, and `hang` stops the process without ending it.
// Trials: HLM_CRASH_TRIALS random-time kills per job (default 2) plus the fixed fault points (4 per job); seed
// HLM_CRASH_SEED (default 1). Each trial prints one line; the totals print at the end of each job's test.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <cstdlib>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"
#include "train/checkpoint_io.h"
#include "train/test_trainer_fixture.h"

using namespace hlm;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Child {
  pid_t pid = -1;
  fs::path log;
};

struct Exit {
  bool killed = false;  // ended by SIGKILL
  int code = -1;        // exit code otherwise
};

// Starts HLM_BINARY with `args` (stdout and stderr to `log`); `fault` sets HYBRIDLM_FAULT; fsize_limit > 0 sets
// RLIMIT_FSIZE with SIGXFSZ ignored (writes past it fail with EFBIG).
Child spawn(const std::vector<std::string>& args, const fs::path& log, const std::string& fault = "",
            rlim_t fsize_limit = 0) {
  // Everything the child needs is prepared before fork (the parent may have threads).
  std::vector<std::string> argv_s = {HLM_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string(*e).rfind("HYBRIDLM_FAULT=", 0) != 0) env_s.emplace_back(*e);
  if (!fault.empty()) env_s.push_back("HYBRIDLM_FAULT=" + fault);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (fsize_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // ignored signals stay ignored across exec: write() fails with EFBIG instead
      const rlimit lim{fsize_limit, fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fd);
  return {pid, log};
}

Exit wait_child(const Child& c) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  Exit e;
  e.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return e;
}

// Kills `c` after `delay` unless it ended before; returns how it ended.
Exit kill_after(const Child& c, std::chrono::microseconds delay) {
  const Clock::time_point end = Clock::now() + delay;
  int status = 0;
  while (Clock::now() < end) {
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) return {false, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(c.pid, SIGKILL);
  return wait_child(c);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

class CliCrash : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    test::use_one_thread();
    dir_ = new test::ScratchDir("cli-crash");
    test::write_tiny_corpus(dir() / "corpus", 120);
    test::write_tiny_teacher_and_student(dir());
    test::write_tiny_teacher_config(dir() / "configs");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path dir() { return dir_->path(); }

  // 12 steps of 4 x 64 tokens, a checkpoint after every step, validation every 3 steps.
  static std::vector<std::string> job_args(const std::string& job, const fs::path& out) {
    std::vector<std::string> a = {job, "--data", (dir() / "corpus").string(), "--out", out.string(),
                                  "--tokens", "3072", "--seq-len", "64", "--batch", "4", "--micro-batch", "2",
                                  "--held-out-docs", "10", "--eval-tokens", "128", "--eval-every", "768",
                                  "--checkpoint-every", "1", "--log-every", "100", "--warmup-steps", "2",
                                  "--min-lr", "1e-4"};
    if (job == "pretrain") {
      a.insert(a.end(), {"--model-config", (dir() / "configs" / "tiny_qwen3.json").string(), "--lr", "3e-3"});
    } else {
      a.insert(a.end(), {"--teacher", (dir() / "teacher").string(), "--student", (dir() / "student").string(),
                         "--lr-rec", "3e-3", "--lr-rest", "1e-3"});
    }
    return a;
  }
  static std::vector<std::string> resume_args(const std::string& job, const fs::path& out) {
    return {job, "--resume", out.string(), "--out", out.string()};
  }

  // Runs to the end after an interruption: nothing when test.json exists (the kill came after the run's last file),
  // resume when a checkpoint exists, otherwise start over in an emptied --out (the run died before its first
  // checkpoint). Returns the number of processes it took.
  static int finish_run(const std::string& job, const fs::path& out, const fs::path& log) {
    if (fs::exists(out / "test.json")) return 0;  // killed after its last file: the run had finished
    const bool resume = !checkpoint_list(out).empty();
    if (!resume) fs::remove_all(out);
    const Exit e = wait_child(spawn(resume ? resume_args(job, out) : job_args(job, out), log));
    EXPECT_TRUE(!e.killed && e.code == 0) << job << " " << (resume ? "resume" : "fresh start") << " exited "
                                           << e.code << ":\n" << test::read_text(log);
    return 1;
  }

  // The uninterrupted run of `job` (once per job): its weights, test.json and wall time.
  struct Reference {
    std::string weights;
    nlohmann::json test;
    double seconds = 0.0;
  };
  static const Reference& reference(const std::string& job) {
    static std::map<std::string, Reference> refs;
    if (!refs.count(job)) {
      const fs::path out = dir() / ("ref_" + job);
      const Clock::time_point t0 = Clock::now();
      const Exit e = wait_child(spawn(job_args(job, out), dir() / ("ref_" + job + ".log")));
      Reference r;
      r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      EXPECT_EQ(e.code, 0) << test::read_text(dir() / ("ref_" + job + ".log"));
      r.weights = test::read_text(out / "model" / "model.safetensors");
      r.test = nlohmann::json::parse(test::read_text(out / "test.json"))["languages"];
      refs[job] = r;
    }
    return refs[job];
  }

  // Whether `out` ended with the uninterrupted run's weights (bit for bit) and test evaluation; a failure otherwise.
  static bool same_as_reference(const std::string& job, const fs::path& out, const std::string& trial) {
    const Reference& ref = reference(job);
    const bool weights = test::read_text(out / "model" / "model.safetensors") == ref.weights;
    const bool test_json =
        fs::exists(out / "test.json") &&
        nlohmann::json::parse(test::read_text(out / "test.json"))["languages"] == ref.test;
    EXPECT_TRUE(weights) << trial << ": final weights differ from the uninterrupted run's";
    EXPECT_TRUE(test_json) << trial << ": test.json differs from the uninterrupted run's";
    return weights && test_json;
  }

  // Random-time kills and kills at fault points, each followed by finish_run; prints one line per trial.
  static void kill_trials(const std::string& job) {
    const Reference& ref = reference(job);
    ASSERT_FALSE(ref.weights.empty());
    std::mt19937_64 rng(static_cast<uint64_t>(env_int("HLM_CRASH_SEED", 1)) * 1000 + job.size());
    const int random_trials = env_int("HLM_CRASH_TRIALS", 2);
    // Fault points inside a checkpoint write (and right after the final model): kill exactly there.
    const std::vector<std::string> faults = {"checkpoint.model@3:kill", "checkpoint.filled@5:kill",
                                             "checkpoint.renamed@7:kill", "model.saved@1:kill"};
    int interrupted = 0, survived = 0, total = 0;
    for (int t = 0; t < random_trials + static_cast<int>(faults.size()); ++t) {
      const bool at_fault = t >= random_trials;
      const std::string fault = at_fault ? faults[static_cast<size_t>(t - random_trials)] : "";
      const fs::path out = dir() / (job + "_trial" + std::to_string(t));
      const fs::path log = dir() / (job + "_trial" + std::to_string(t) + ".log");
      // Over the first 80% of the reference's wall time: later runs are often a little faster (warm caches), and a
      // kill after the last file tests nothing.
      std::uniform_real_distribution<double> when(0.0, 0.8 * ref.seconds);
      const double delay = at_fault ? 0.0 : when(rng);
      const Child c = spawn(job_args(job, out), log, fault);
      const Exit first = at_fault ? wait_child(c)
                                  : kill_after(c, std::chrono::microseconds(static_cast<int64_t>(delay * 1e6)));
      if (at_fault) EXPECT_TRUE(first.killed) << fault << ": the fault point was not reached\n" << test::read_text(log);
      const size_t checkpoints = checkpoint_list(out).size();
      const int processes = first.killed ? 1 + finish_run(job, out, log) : 1;
      if (!first.killed) EXPECT_EQ(first.code, 0) << test::read_text(log);
      const std::string name = job + " trial " + std::to_string(t) +
                               (at_fault ? " (" + fault + ")" : " (kill after " + std::to_string(delay) + " s)");
      const bool ok = same_as_reference(job, out, name);
      ++total;
      interrupted += first.killed ? 1 : 0;
      survived += first.killed && ok ? 1 : 0;
      std::printf("[crash] %s: %s, %zu checkpoint(s) on disk, %d more process(es) to finish, %s\n", name.c_str(),
                  first.killed ? "killed" : "finished before the kill", checkpoints, processes - 1,
                  ok ? "bit-identical" : "DIFFERENT");
      fs::remove_all(out);
    }
    std::printf("[crash] %s: %d trials, %d interrupted by SIGKILL, %d of those bit-identical after resume "
                "(reference run %.2f s)\n",
                job.c_str(), total, interrupted, survived, ref.seconds);
    std::fflush(stdout);
  }

  static test::ScratchDir* dir_;
};

test::ScratchDir* CliCrash::dir_ = nullptr;

}  // namespace

TEST_F(CliCrash, PretrainKilledAnywhereResumesBitIdentical) { kill_trials("pretrain"); }

TEST_F(CliCrash, DistillKilledAnywhereResumesBitIdentical) { kill_trials("distill"); }

TEST_F(CliCrash, FailedCheckpointWriteKeepsThePreviousCheckpoint) {
  const Reference& ref = reference("pretrain");
  const fs::path out = dir() / "fsize";
  std::vector<std::string> first = job_args("pretrain", out);
  first.insert(first.end(), {"--stop-after-steps", "2"});
  ASSERT_EQ(wait_child(spawn(first, dir() / "fsize1.log")).code, 0) << test::read_text(dir() / "fsize1.log");
  const fs::path kept = out / "checkpoint-00000002";
  ASSERT_EQ(checkpoint_list(out), std::vector<fs::path>{kept});
  const std::string kept_weights = test::read_text(kept / "model.safetensors");

  // Room for the model file but not for the optimizer state (twice its size): the step-3 checkpoint fails.
  const auto limit = static_cast<rlim_t>(fs::file_size(kept / "model.safetensors") + 4096);
  ASSERT_LT(limit, fs::file_size(kept / "optimizer.safetensors"));
  const Exit e = wait_child(spawn(resume_args("pretrain", out), dir() / "fsize2.log", "", limit));
  const std::string log = test::read_text(dir() / "fsize2.log");
  EXPECT_FALSE(e.killed);
  EXPECT_EQ(e.code, 2) << log;
  EXPECT_NE(log.find("writing checkpoint-00000003 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("optimizer.safetensors: write failed: File too large"), std::string::npos) << log;
  EXPECT_NE(log.find("checkpoint-00000002 is intact"), std::string::npos) << log;
  // The previous checkpoint: the only one, unchanged, verified by its manifest; no leftovers of the failed write.
  EXPECT_EQ(checkpoint_list(out), std::vector<fs::path>{kept});
  EXPECT_EQ(test::read_text(kept / "model.safetensors"), kept_weights);
  EXPECT_NO_THROW(checkpoint_verify(kept));
  for (const auto& entry : fs::directory_iterator(out))
    EXPECT_EQ(entry.path().filename().string().find(".checkpoint-"), std::string::npos) << entry.path();
  // With room again the run resumes from it and ends where the uninterrupted run ended.
  ASSERT_EQ(wait_child(spawn(resume_args("pretrain", out), dir() / "fsize3.log")).code, 0)
      << test::read_text(dir() / "fsize3.log");
  EXPECT_TRUE(test::read_text(out / "model" / "model.safetensors") == ref.weights);
}

TEST_F(CliCrash, SecondProcessOnTheSameOutRefusesAndTheFirstIsUnharmed) {
  const Reference& ref = reference("distill");
  const fs::path out = dir() / "locked";
  const Child a = spawn(job_args("distill", out), dir() / "lock_a.log");
  // Wait for the first checkpoint (the lock is taken before anything else is written), then freeze the process.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
  while (checkpoint_list(out).empty() && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(::kill(a.pid, SIGSTOP), 0);
  const bool running = checkpoint_list(out).size() >= 1 && !fs::exists(out / "test.json");
  for (const auto& args : {job_args("distill", out), resume_args("distill", out)}) {
    const test::RunResult b = [&] {
      const Exit e = wait_child(spawn(args, dir() / "lock_b.log"));
      return test::RunResult{e.code, "", test::read_text(dir() / "lock_b.log")};
    }();
    EXPECT_EQ(b.exit_code, 2) << b.err;
    EXPECT_NE(b.err.find("another hybridlm process is training into this directory"), std::string::npos) << b.err;
  }
  ASSERT_EQ(::kill(a.pid, SIGCONT), 0);
  const Exit e = wait_child(a);
  EXPECT_TRUE(running) << "the first process ended before the second started";
  EXPECT_EQ(e.code, 0) << test::read_text(dir() / "lock_a.log");
  EXPECT_TRUE(test::read_text(out / "model" / "model.safetensors") == ref.weights);
}

// HYBRIDLM_FAULT (train/fault_inject.h): a malformed value is an input error (exit 2, naming the value) at the first
// fault point the run reaches; `hang` stops the process at its point without ending it (no later checkpoint is
// written, the process is still there 2 s later) and SIGTERM still ends it (no handler is installed). The
// data-parallel test of the collective timeout (tests/dist, DistTrain.AHangingRankTimesOutEveryRank) relies on both.
TEST_F(CliCrash, FaultValuesAreStrictAndHangStopsTheProcess) {
  const fs::path out = dir() / "fault_value", log = dir() / "fault_value.log";
  for (const std::string bad : {"train.step@1:hang2", "train.step@0:hang", "train.step@x:kill", "train.step@2x:kill",
                                "train.step@+2:fail", "train.step@:fail", "train.step:fail", "train.step@1"}) {
    fs::remove_all(out);
    const Exit e = wait_child(spawn(job_args("pretrain", out), log, bad));
    const std::string text = test::read_text(log);
    EXPECT_FALSE(e.killed) << bad;
    EXPECT_EQ(e.code, 2) << bad << ":\n" << text;
    EXPECT_NE(text.find("HYBRIDLM_FAULT='" + bad + "'"), std::string::npos) << bad << ":\n" << text;
  }

  const fs::path hang_out = dir() / "fault_hang", hang_log = dir() / "fault_hang.log";
  const Child c = spawn(job_args("pretrain", hang_out), hang_log, "train.step@2:hang");
  const std::string said = "HYBRIDLM_FAULT: hanging the process at train.step (pass 2)";
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
  int status = 0;
  bool ended = false;
  while (!ended && test::read_text(hang_log).find(said) == std::string::npos && Clock::now() < give_up) {
    ended = ::waitpid(c.pid, &status, WNOHANG) == c.pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!ended) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ended = ::waitpid(c.pid, &status, WNOHANG) == c.pid;
  }
  const std::string text = test::read_text(hang_log);
  EXPECT_NE(text.find(said), std::string::npos) << text;
  EXPECT_FALSE(ended) << "the process ended instead of hanging:\n" << text;
  for (const fs::path& p : checkpoint_list(hang_out))
    EXPECT_EQ(p.filename().string(), "checkpoint-00000001") << "a checkpoint after the hang point was written";
  if (!ended) {
    ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
    const Clock::time_point t0 = Clock::now();
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
    std::printf("hang: the process stopped at train.step (pass 2); SIGTERM ended it in %.3f s\n", seconds);
  }
}
