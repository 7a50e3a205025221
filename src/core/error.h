// One error type for the whole engine, with a kind (decides the exit code) and a context chain.
// Input errors (bad files, bad flags) exit with code 2; internal errors (broken invariants) with 1.
// Usage:
//   HLM_CHECK_INPUT(n >= 0, "negative length ", n);        // throws Error{Input}
//   HLM_CHECK(ptr != nullptr, "arena exhausted");           // throws Error{Internal}
//   try { ... } catch (hlm::Error& e) { e.add_context("file ", path); throw; }
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hlm {

enum class ErrorKind { Input, Internal };

class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) { rebuild(); }

  template <typename... Args>
  Error& add_context(const Args&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    context_.push_back(os.str());
    rebuild();
    return *this;
  }

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const char* what() const noexcept override { return full_.c_str(); }
  int exit_code() const { return kind_ == ErrorKind::Input ? 2 : 1; }

 private:
  // Outermost context first: "file x: tensor y: shape mismatch".
  void rebuild() {
    full_.clear();
    for (auto it = context_.rbegin(); it != context_.rend(); ++it) full_ += *it + ": ";
    full_ += message_;
  }
  ErrorKind kind_;
  std::string message_;
  std::vector<std::string> context_;
  std::string full_;
};

template <typename... Args>
std::string str_cat(const Args&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <typename... Args>
[[noreturn]] void throw_input_error(const Args&... parts) {
  throw Error(ErrorKind::Input, str_cat(parts...));
}

template <typename... Args>
[[noreturn]] void throw_internal_error(const Args&... parts) {
  throw Error(ErrorKind::Internal, str_cat(parts...));
}

}  // namespace hlm

#define HLM_CHECK_INPUT(cond, ...)                              \
  do {                                                          \
    if (!(cond)) ::hlm::throw_input_error(__VA_ARGS__);         \
  } while (0)

#define HLM_CHECK(cond, ...)                                                                       \
  do {                                                                                             \
    if (!(cond)) ::hlm::throw_internal_error(__FILE__, ":", __LINE__, ": check `" #cond "` failed: ", \
                                             ##__VA_ARGS__);                                       \
  } while (0)
