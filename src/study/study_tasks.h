// The study's stages as tasks with dependencies, run one after another in this process (jobs 1, the default) or up
// to `jobs` at a time in child processes (`hybridlm study --jobs N`, CPU stages only).
//
// A task's turn comes when every task in `after` has finished. Then, in this process:
//   start()   decides whether the stage must run (false: it is done already and said so) and prints its progress line;
//   work()    the stage's computation: called inline with jobs 1, else in a forked child whose stdout and stderr go to
//             `<log_dir>/<stage>.<name>.log` (the trainer's step lines, the analysis progress);
//   finish()  after work() succeeded: the done marker, the "done" line, counters.
// Everything a later task reads from an earlier one travels through files (models, metrics, done markers) or through
// start()/finish(), which always run in this process: a child changes nothing in the parent's memory.
//
// Children are forked before this process runs any computation of its own (the study's parent only plans, marks and
// reports), so OpenMP's thread pool is never duplicated half-initialized. A child that fails makes the run stop
// launching tasks, wait for the running ones, print the last lines of the failed one's log and throw: an input error
// (exit 2) when the child exited 2, an internal error otherwise (a signal included). A child whose parent dies gets
// SIGTERM (PR_SET_PDEATHSIG), so no stage trains on after a killed study.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace hlm {

struct StudyTask {
  std::string stage;           // "teacher", "convert", "distill", "align", "locality"
  std::string name;            // the model or run it makes: "reverse_periodic seed 1" (log file name, messages)
  std::vector<size_t> after;   // indices of earlier tasks that must have finished first
  std::function<bool()> start;
  std::function<void()> work;
  std::function<void()> finish;
};

// Runs every task (indices in `after` must be smaller than the task's own). jobs >= 1.
void study_tasks_run(std::vector<StudyTask>& tasks, int jobs, const std::filesystem::path& log_dir);

// The log file of a task run in a child: <log_dir>/<stage>.<name with every character outside [A-Za-z0-9._-] as _>.log
std::filesystem::path study_task_log(const std::filesystem::path& log_dir, const StudyTask& task);

}  // namespace hlm
