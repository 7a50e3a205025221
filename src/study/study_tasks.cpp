// Task runner of the study's stages (study_tasks.h): inline with one job, forked children with more.
#include "study/study_tasks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <optional>

#include "core/error.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

// The child's side: output into the log, the work, an exit code as the CLI would give (2 input, 1 internal).
[[noreturn]] void run_child(const StudyTask& task, const fs::path& log, pid_t parent) {
  // Stop with the parent: a study killed (or stopped by `timeout`) must not leave stages training on.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);  // the parent died before the line above took effect
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "hybridlm: error: study [%s] %s: cannot write its log %s (%s)\n", task.stage.c_str(),
                 task.name.c_str(), log.c_str(), std::strerror(errno));
    _exit(2);
  }
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  int code = 0;
  try {
    task.work();
  } catch (const Error& e) {
    std::fprintf(stderr, "hybridlm: error: %s\n", e.what());
    code = e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybridlm: internal error: %s\n", e.what());
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);  // no atexit handlers or static destructors of the parent's copy
}

std::string log_tail(const fs::path& log, size_t lines) {
  std::ifstream in(log);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const std::string& line : last) out += "  | " + line + "\n";
  return out;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

}  // namespace

fs::path study_task_log(const fs::path& log_dir, const StudyTask& task) {
  std::string name = task.stage + "." + task.name;
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return log_dir / (name + ".log");
}

void study_tasks_run(std::vector<StudyTask>& tasks, int jobs, const fs::path& log_dir) {
  HLM_CHECK_INPUT(jobs >= 1, "study: --jobs ", jobs, " must be at least 1");
  for (size_t i = 0; i < tasks.size(); ++i)
    for (size_t a : tasks[i].after) HLM_CHECK(a < i, "study: task ", i, " waits for a later task ", a);
  if (jobs == 1) {
    for (StudyTask& t : tasks)
      if (t.start()) {
        t.work();
        t.finish();
      }
    return;
  }

  enum class State { Waiting, Running, Done };
  std::vector<State> state(tasks.size(), State::Waiting);
  std::map<pid_t, size_t> running;
  struct Failure {
    size_t task;
    int status;
  };
  std::optional<Failure> failure;
  fs::create_directories(log_dir);
  const pid_t self = ::getpid();
  for (;;) {
    // Launch the earliest ready tasks (their order is the one-job order) while slots are free.
    while (!failure && static_cast<int>(running.size()) < jobs) {
      size_t next = tasks.size();
      for (size_t i = 0; i < tasks.size() && next == tasks.size(); ++i) {
        if (state[i] != State::Waiting) continue;
        bool ready = true;
        for (size_t a : tasks[i].after) ready = ready && state[a] == State::Done;
        if (ready) next = i;
      }
      if (next == tasks.size()) break;
      if (!tasks[next].start()) {
        state[next] = State::Done;
        continue;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      const pid_t pid = ::fork();
      if (pid < 0) {
        failure = Failure{next, -1};
        std::fprintf(stderr, "study [%s] %s: cannot start a process (%s)\n", tasks[next].stage.c_str(),
                     tasks[next].name.c_str(), std::strerror(errno));
        break;
      }
      if (pid == 0) run_child(tasks[next], study_task_log(log_dir, tasks[next]), self);
      running[pid] = next;
      state[next] = State::Running;
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw_internal_error("study: waiting for the stages' processes failed: ", std::strerror(errno));
    }
    const auto it = running.find(pid);
    if (it == running.end()) continue;  // not one of ours
    const size_t i = it->second;
    running.erase(it);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      tasks[i].finish();
      state[i] = State::Done;
    } else if (!failure) {
      failure = Failure{i, status};
    }
  }
  if (failure) {
    const StudyTask& t = tasks[failure->task];
    const fs::path log = study_task_log(log_dir, t);
    if (failure->status == -1) throw_internal_error("study [", t.stage, "] ", t.name, ": cannot start a process");
    std::fprintf(stderr, "study [%s] %s failed (%s); the last lines of its log %s:\n%s", t.stage.c_str(),
                 t.name.c_str(), describe_status(failure->status).c_str(), log.c_str(), log_tail(log, 12).c_str());
    std::fflush(stderr);
    const bool input = WIFEXITED(failure->status) && WEXITSTATUS(failure->status) == 2;
    const std::string what = "study [" + t.stage + "] " + t.name + " failed (" + describe_status(failure->status) +
                             "); its log: " + log.string() + "; the finished stages are kept, a rerun resumes";
    if (input) throw_input_error(what);
    throw_internal_error(what);
  }
  for (size_t i = 0; i < tasks.size(); ++i)
    HLM_CHECK(state[i] == State::Done, "study: task ", tasks[i].stage, " ", tasks[i].name, " never ran");
}

}  // namespace hlm
