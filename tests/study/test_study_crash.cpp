// `hybridlm study` after a kill in any stage, and after a stage that fails (issue #19 item 3, issue #27 item 3):
// the study is killed (SIGKILL through HYBRIDLM_FAULT, train/fault_inject.h) inside the teacher's pretraining, inside
// a distillation's checkpoint write, between stages, and right after a run's final model; a rerun of the same command
// finishes every stage and the teacher and every distilled model are bit-identical to an uninterrupted study's. A
// stage that fails (an injected I/O error in a distillation's checkpoint write) exits non-zero and keeps every
// finished stage's outputs (teacher, converted students, done markers), which the rerun skips. A setting that cannot
// work for a later stage (the distill rows longer than any held-out document) is refused before the first stage.
// With --jobs 2 (stages in child processes) the same: a killed study stops its children, a failed child names its
// stage and log, and the rerun ends with the same models.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "train/test_trainer_fixture.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct StudyExit {
  bool killed = false;
  int code = -1;
  std::string output;
};

StudyExit run_study(const fs::path& config, const fs::path& out, const std::string& fault,
                    const std::string& extra = "") {
  const fs::path log = out.string() + ".log";
  const std::string env = fault.empty() ? "env -u HYBRIDLM_FAULT " : "env HYBRIDLM_FAULT=" + fault + " ";
  const std::string cmd = env + HLM_BINARY + " study --config " + config.string() + " --out " + out.string() +
                          extra + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  StudyExit r;
  // /bin/sh reports a child killed by signal s as exit status 128 + s (or execs it: then the status says so).
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.killed = r.code == 128 + SIGKILL || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  r.output = slurp(log);
  return r;
}

class StudyCrash : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    test::use_one_thread();
    dir_ = fs::temp_directory_path() / ("hlm_study_crash_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    test::write_tiny_corpus(dir_ / "corpus", 120);
    // No parallel set: the analysis stages are out of this test's scope (tests/study/test_study.cpp runs them).
    config_ = {{"data", (dir_ / "corpus").string()},
               {"parallel", ""},  // no analysis stages (the default names the demo set, absent in a clean checkout)
               {"teacher", {{"model_config", json::parse(test::tiny_teacher_config_json(2))}}},
               {"pretrain",
                {{"tokens", 4 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 2}, {"lr", 3e-3},
                 {"held_out_docs", 10}, {"eval_tokens", 128}, {"eval_every_tokens", 0},
                 {"checkpoint_every_steps", 1}, {"log_every_steps", 1000}}},
               {"distill",
                {{"tokens", 4 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 2},
                 {"lr_rec", 3e-3}, {"lr_rest", 1e-3}, {"min_lr", 1e-4}, {"warmup_steps", 1}, {"held_out_docs", 10},
                 {"eval_tokens", 128}, {"eval_every_tokens", 2 * 4 * 64}, {"checkpoint_every_steps", 1},
                 {"log_every_steps", 1000}}},
               {"placements", {{"names", {"standard_periodic", "reverse_periodic"}}, {"full", 1}}}};
    config_path_ = dir_ / "study.json";
    std::ofstream(config_path_) << config_.dump(2);
    const StudyExit ref = run_study(config_path_, dir_ / "reference", "");
    ASSERT_EQ(ref.code, 0) << ref.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // Bytes of the models every later stage reads: the teacher and each distilled student.
  static std::vector<std::string> models(const fs::path& out) {
    return {slurp(out / "teacher/model/model.safetensors"),
            slurp(out / "runs/standard_periodic/model/model.safetensors"),
            slurp(out / "runs/reverse_periodic/model/model.safetensors")};
  }

  static fs::path dir_, config_path_;
  static json config_;
};

fs::path StudyCrash::dir_, StudyCrash::config_path_;
json StudyCrash::config_;

TEST_F(StudyCrash, KilledInAnyStageResumesToTheSameModels) {
  const std::vector<std::string> reference = models(dir_ / "reference");
  ASSERT_FALSE(reference[0].empty());
  // Checkpoint writes count over the whole process: 4 in the teacher's run (one per step), then 4 per distillation.
  const std::vector<std::pair<std::string, std::string>> trials = {
      {"checkpoint.filled@2:kill", "teacher pretraining, inside its 2nd checkpoint write"},
      {"study.stage@1:kill", "between stages, right after the teacher's done marker"},
      {"checkpoint.renamed@6:kill", "first distillation, between its 2nd checkpoint's rename and the cleanup"},
      {"model.saved@3:kill", "second distillation, after its final model, before its test evaluation"},
  };
  for (size_t i = 0; i < trials.size(); ++i) {
    const fs::path out = dir_ / ("trial" + std::to_string(i));
    const StudyExit killed = run_study(config_path_, out, trials[i].first);
    EXPECT_TRUE(killed.killed) << trials[i].second << ": not killed\n" << killed.output;
    const StudyExit rerun = run_study(config_path_, out, "");
    ASSERT_EQ(rerun.code, 0) << trials[i].second << "\n" << rerun.output;
    EXPECT_TRUE(models(out) == reference) << trials[i].second << ": models differ from the uninterrupted study's";
    std::printf("[crash] study killed at %s (%s): rerun completed, models bit-identical\n", trials[i].first.c_str(),
                trials[i].second.c_str());
  }
}

TEST_F(StudyCrash, FailedStageKeepsEveryFinishedStage) {
  const fs::path out = dir_ / "failing";
  // The 6th checkpoint write of the process (the first distillation's 2nd) fails as a full disk would.
  const StudyExit failed = run_study(config_path_, out, "checkpoint.filled@6:fail");
  EXPECT_EQ(failed.code, 2) << failed.output;
  EXPECT_NE(failed.output.find("injected fault at checkpoint.filled"), std::string::npos) << failed.output;
  for (const char* kept : {"teacher/done.json", "teacher/model/model.safetensors", "teacher/test.json",
                           "students/standard_periodic/done.json", "runs/standard_periodic/checkpoint-00000001"})
    EXPECT_TRUE(fs::exists(out / kept)) << kept;
  const std::string teacher = slurp(out / "teacher/model/model.safetensors");
  const StudyExit rerun = run_study(config_path_, out, "");
  ASSERT_EQ(rerun.code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("study [teacher] skipped (done)"), std::string::npos) << rerun.output;
  EXPECT_NE(rerun.output.find("study [distill] standard_periodic: resuming from its newest checkpoint"),
            std::string::npos)
      << rerun.output;
  EXPECT_EQ(slurp(out / "teacher/model/model.safetensors"), teacher);
  EXPECT_TRUE(models(out) == models(dir_ / "reference"));
}

// With --jobs 2 the stages run in child processes (study/study_tasks.h). (1) The study itself is killed right after
// its third done marker (teacher, then the two converts, which run side by side), when the distillation of the
// first-converted student has just started in a child: that child must stop with the study (it gets SIGTERM when
// its parent dies), so no run reaches its test evaluation afterwards. (2) A rerun whose distillations fail at their
// 2nd checkpoint write (the fault counts per process, and each distillation is a process of its own) exits 2 naming
// the failed stage, its log and the child's error. (3) A plain rerun resumes the distillations from their
// checkpoints and ends with the uninterrupted one-job study's models, byte for byte.
TEST_F(StudyCrash, SideBySideStagesStopWithTheStudyAndResumeToTheSameModels) {
  const fs::path out = dir_ / "jobs";
  const StudyExit killed = run_study(config_path_, out, "study.stage@3:kill", " --jobs 2");
  EXPECT_TRUE(killed.killed) << killed.output;
  EXPECT_NE(killed.output.find("study [distill] "), std::string::npos) << killed.output;  // one had started
  // A distillation takes over a second here; an orphaned one would have written its test.json by then.
  ::usleep(3000 * 1000);
  for (const char* run : {"runs/standard_periodic", "runs/reverse_periodic"})
    EXPECT_FALSE(fs::exists(out / run / "test.json")) << run << ": a stage kept running after the study was killed";

  const StudyExit failed = run_study(config_path_, out, "checkpoint.filled@2:fail", " --jobs 2");
  EXPECT_EQ(failed.code, 2) << failed.output;
  EXPECT_NE(failed.output.find("failed (exit code 2); the last lines of its log"), std::string::npos)
      << failed.output;
  EXPECT_NE(failed.output.find("injected fault at checkpoint.filled"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("/logs/distill."), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("a rerun resumes"), std::string::npos) << failed.output;

  const StudyExit rerun = run_study(config_path_, out, "", " --jobs 2");
  ASSERT_EQ(rerun.code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("study [teacher] skipped (done)"), std::string::npos) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming from its newest checkpoint"), std::string::npos) << rerun.output;
  EXPECT_TRUE(models(out) == models(dir_ / "reference")) << "models differ from the one-job study's";
}

TEST_F(StudyCrash, LaterStageSettingThatCannotWorkIsRefusedBeforeTheFirstStage) {
  json bad = config_;
  bad["distill"]["seq_len"] = 4096;  // longer than all 10 held-out documents of a language together
  bad["distill"]["eval_tokens"] = 4096;
  bad["distill"]["tokens"] = 4 * 4096;
  const fs::path config = dir_ / "bad.json";
  std::ofstream(config) << bad.dump(2);
  const fs::path out = dir_ / "bad_out";
  const StudyExit r = run_study(config, out, "");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("study config, section 'distill'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("split of eng_Latn has no full row of --seq-len 4096"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));  // not even study_config.json: the teacher never started
}

}  // namespace
}  // namespace hlm
