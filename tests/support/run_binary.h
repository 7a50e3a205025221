// Runs the hybridlm binary (HLM_BINARY) with arguments through /bin/sh, capturing exit code, stdout and stderr.
// Also creates scratch directories that are removed at the end of the test.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace hlm::test {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("hybridlm-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path path_;
};

// Runs a shell command line, capturing its exit code (128 + signal when killed), stdout and stderr.
inline RunResult run_shell(const std::string& command) {
  ScratchDir io("io");
  const auto out = io.path() / "out", err = io.path() / "err";
  const std::string cmd = command + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// `args` is appended to the binary path verbatim (quote paths yourself when needed).
inline RunResult run_hybridlm(const std::string& args) { return run_shell(std::string(HLM_BINARY) + " " + args); }

}  // namespace hlm::test
