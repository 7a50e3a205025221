// Runner of the GoogleTest stand-in (gtest/gtest.h beside this file), with main().
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace testing {

namespace {

struct RunState {
  bool failed = false;
  bool skipped = false;
};
RunState* g_current = nullptr;
std::string g_filter = "*";
bool g_list_only = false;

bool glob_match(const char* pattern, const char* text) {
  if (*pattern == '\0') return *text == '\0';
  if (*pattern == '*') return glob_match(pattern + 1, text) || (*text != '\0' && glob_match(pattern, text + 1));
  if (*text == '\0') return false;
  return (*pattern == '?' || *pattern == *text) && glob_match(pattern + 1, text + 1);
}

bool any_match(const std::string& patterns, const std::string& name) {
  size_t start = 0;
  while (start <= patterns.size()) {
    const size_t end = std::min(patterns.find(':', start), patterns.size());
    const std::string p = patterns.substr(start, end - start);
    if (!p.empty() && glob_match(p.c_str(), name.c_str())) return true;
    start = end + 1;
  }
  return false;
}

bool filter_accepts(const std::string& name) {
  const size_t dash = g_filter.find('-');
  const std::string pos = dash == std::string::npos ? g_filter : g_filter.substr(0, dash);
  const std::string neg = dash == std::string::npos ? "" : g_filter.substr(dash + 1);
  return (pos.empty() ? true : any_match(pos, name)) && !any_match(neg, name);
}

}  // namespace

namespace internal {

std::vector<TestInfo>& registry() {
  static std::vector<TestInfo> tests;
  return tests;
}

bool register_test(const char* suite, const char* name, std::function<Test*()> factory) {
  registry().push_back({suite, name, std::move(factory)});
  return true;
}

std::vector<std::string>& traces() {
  static std::vector<std::string> t;
  return t;
}

void push_trace(const char* file, int line, const std::string& message) {
  traces().push_back(std::string(file) + ":" + std::to_string(line) + ": " + message);
}

void pop_trace() { traces().pop_back(); }

void report_failure(const char* file, int line, const std::string& text) {
  std::cout << file << ":" << line << ": Failure\n" << text << "\n";
  if (!traces().empty()) {
    std::cout << "Google Test trace:\n";
    for (auto it = traces().rbegin(); it != traces().rend(); ++it) std::cout << *it << "\n";
  }
  if (g_current != nullptr) g_current->failed = true;
}

void report_skip(const std::string& text) {
  std::cout << "Skipped\n" << text << "\n";
  if (g_current != nullptr) g_current->skipped = true;
}

}  // namespace internal

void InitGoogleTest(int* argc, char** argv) {
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_filter=", 15) == 0) g_filter = argv[i] + 15;
    if (std::strcmp(argv[i], "--gtest_list_tests") == 0) g_list_only = true;
  }
}

int RunAllTests() {
  auto& tests = internal::registry();
  if (g_list_only) {
    std::string suite;
    for (const auto& t : tests) {
      if (t.suite != suite) std::cout << (suite = t.suite) << ".\n";
      std::cout << "  " << t.name << "\n";
    }
    return 0;
  }
  std::vector<std::string> failed, skipped;
  int ran = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::cout << "[==========] Running tests (GoogleTest stand-in, filter " << g_filter << ")\n";
  for (const auto& t : tests) {
    if (!filter_accepts(t.full())) continue;
    ++ran;
    std::cout << "[ RUN      ] " << t.full() << std::endl;
    RunState state;
    g_current = &state;
    const auto s0 = std::chrono::steady_clock::now();
    try {
      std::unique_ptr<Test> test(t.factory());
      test->TestBody();
    } catch (const std::exception& e) {
      internal::report_failure("unknown", 0, std::string("C++ exception thrown in the test body: ") + e.what());
    } catch (...) {
      internal::report_failure("unknown", 0, "unknown C++ exception thrown in the test body");
    }
    g_current = nullptr;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - s0).count();
    if (state.failed) {
      failed.push_back(t.full());
      std::cout << "[  FAILED  ] " << t.full() << " (" << ms << " ms)" << std::endl;
    } else if (state.skipped) {
      skipped.push_back(t.full());
      std::cout << "[  SKIPPED ] " << t.full() << " (" << ms << " ms)" << std::endl;
    } else {
      std::cout << "[       OK ] " << t.full() << " (" << ms << " ms)" << std::endl;
    }
  }
  const auto total =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[==========] " << ran << " tests ran. (" << total << " ms total)\n";
  std::cout << "[  PASSED  ] " << (ran - static_cast<int>(failed.size()) - static_cast<int>(skipped.size()))
            << " tests.\n";
  if (!skipped.empty()) {
    std::cout << "[  SKIPPED ] " << skipped.size() << " tests, listed below:\n";
    for (const auto& s : skipped) std::cout << "[  SKIPPED ] " << s << "\n";
  }
  if (!failed.empty()) {
    std::cout << "[  FAILED  ] " << failed.size() << " tests, listed below:\n";
    for (const auto& f : failed) std::cout << "[  FAILED  ] " << f << "\n";
  }
  std::cout << std::flush;
  return failed.empty() ? 0 : 1;
}

}  // namespace testing

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
