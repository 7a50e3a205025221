// A minimal stand-in for the GoogleTest subset that tests/cuda uses, for machines without GoogleTest (the GPU
// machine's image has no Debian -dev packages). Only the standalone CUDA test build (tests/cuda/standalone) puts this
// folder on the include path, and only when find_package(GTest) fails; everywhere else the real GoogleTest is used.
//
// Supported: TEST, EXPECT_/ASSERT_ {TRUE, FALSE, EQ, NE, LT, LE, GT, GE, NEAR, THROW, NO_THROW}, FAIL, ADD_FAILURE,
// SCOPED_TRACE, GTEST_SKIP, SUCCEED, ::testing::AssertionResult / AssertionSuccess / AssertionFailure (with <<), streaming extra
// messages with <<, --gtest_filter=POS[:POS...][-NEG[:NEG...]] with * and ? wildcards, --gtest_list_tests. Output
// follows GoogleTest's lines ([ RUN      ], [       OK ], [  SKIPPED ], [  FAILED  ], [  PASSED  ]).
// Not supported: fixtures (TEST_F), parameterized tests, death tests, XML output.
// Kept honest by two builds (tests/cuda/CMakeLists.txt): the main CUDA build also compiles test_cuda_ops against this
// stand-in (test_cuda_ops_shim, CI has nvcc), and shim_selftest.cpp checks that every macro fails when it should.
#pragma once
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace testing {

class Message {
 public:
  template <typename T>
  Message& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

class AssertionResult {
 public:
  explicit AssertionResult(bool ok) : ok_(ok) {}
  AssertionResult(const AssertionResult& o) : ok_(o.ok_), message_(o.message_) {}
  explicit operator bool() const { return ok_; }
  const char* message() const { return message_.c_str(); }
  template <typename T>
  AssertionResult& operator<<(const T& v) {
    std::ostringstream os;
    os << v;
    message_ += os.str();
    return *this;
  }

 private:
  bool ok_;
  std::string message_;
};

inline AssertionResult AssertionSuccess() { return AssertionResult(true); }
inline AssertionResult AssertionFailure() { return AssertionResult(false); }

class Test {
 public:
  virtual ~Test() = default;
  virtual void TestBody() = 0;
};

namespace internal {

struct TestInfo {
  std::string suite, name;
  std::function<Test*()> factory;
  std::string full() const { return suite + "." + name; }
};

std::vector<TestInfo>& registry();
bool register_test(const char* suite, const char* name, std::function<Test*()> factory);

// Records a failure (fatal or not) or a skip of the running test.
void report_failure(const char* file, int line, const std::string& text);
void report_skip(const std::string& text);

class AssertHelper {
 public:
  AssertHelper(const char* file, int line, std::string text) : file_(file), line_(line), text_(std::move(text)) {}
  void operator=(const Message& m) const { report_failure(file_, line_, text_ + (m.str().empty() ? "" : "\n") + m.str()); }

 private:
  const char* file_;
  int line_;
  std::string text_;
};

class SkipHelper {
 public:
  void operator=(const Message& m) const { report_skip(m.str()); }
};

// Streams a value if it can be streamed: enums as their number, anything else as "(value)".
template <typename T>
std::string print(const T& v) {
  std::ostringstream os;
  if constexpr (requires(std::ostream& o, const T& t) { o << t; }) {
    os << v;
  } else if constexpr (std::is_enum_v<T>) {
    os << static_cast<long long>(v);
  } else {
    os << "(value)";
  }
  return os.str();
}

// SCOPED_TRACE: while the object lives, every failure also prints its file:line and message.
void push_trace(const char* file, int line, const std::string& message);
void pop_trace();
class ScopedTrace {
 public:
  template <typename T>
  ScopedTrace(const char* file, int line, const T& message) {
    push_trace(file, line, print(message));
  }
  ~ScopedTrace() { pop_trace(); }
  ScopedTrace(const ScopedTrace&) = delete;
  ScopedTrace& operator=(const ScopedTrace&) = delete;
};

template <typename A, typename B>
AssertionResult compare(bool ok, const char* op, const char* ea, const char* eb, const A& a, const B& b) {
  if (ok) return AssertionSuccess();
  AssertionResult r = AssertionFailure();
  r << "Expected: (" << ea << ") " << op << " (" << eb << "), actual: " << print(a) << " vs " << print(b);
  return r;
}

// EXPECT_NEAR: |a - b| <= abs_error, as GoogleTest (equal values pass, infinities included; NaN always fails).
inline AssertionResult near(const char* ea, const char* eb, const char* eabs, double a, double b, double abs_error) {
  if (a == b) return AssertionSuccess();
  const double diff = a > b ? a - b : b - a;
  if (diff <= abs_error) return AssertionSuccess();
  AssertionResult r = AssertionFailure();
  r << "The difference between " << ea << " and " << eb << " is " << diff << ", which exceeds " << eabs << ", where\n"
    << ea << " evaluates to " << a << ",\n" << eb << " evaluates to " << b << ", and\n" << eabs << " evaluates to "
    << abs_error << ".";
  return r;
}

// The condition of EXPECT_TRUE and friends, evaluated once: a bool or an AssertionResult (whose message is kept).
inline AssertionResult bool_result(const AssertionResult& r, const char* text) {
  if (r) return r;
  AssertionResult out = AssertionFailure();
  out << "Value of: " << text << "\n" << r.message();
  return out;
}
inline AssertionResult bool_result(bool b, const char* text) {
  if (b) return AssertionSuccess();
  AssertionResult out = AssertionFailure();
  out << "Value of: " << text;
  return out;
}

}  // namespace internal

void InitGoogleTest(int* argc, char** argv);
int RunAllTests();

}  // namespace testing

#define RUN_ALL_TESTS() ::testing::RunAllTests()

#define HLM_GTEST_CLASS_(suite, name) suite##_##name##_Test
#define TEST(suite, name)                                                                                 \
  class HLM_GTEST_CLASS_(suite, name) : public ::testing::Test {                                          \
   public:                                                                                                \
    void TestBody() override;                                                                             \
  };                                                                                                      \
  static const bool hlm_gtest_registered_##suite##_##name = ::testing::internal::register_test(           \
      #suite, #name, [] { return static_cast<::testing::Test*>(new HLM_GTEST_CLASS_(suite, name)()); });  \
  void HLM_GTEST_CLASS_(suite, name)::TestBody()

#define HLM_GTEST_BLOCKER_ \
  switch (0)               \
  case 0:                  \
  default:

#define HLM_GTEST_CHECK_(result_expr, fatal_return)                                       \
  HLM_GTEST_BLOCKER_                                                                      \
  if (const ::testing::AssertionResult hlm_gtest_ar_ = (result_expr))                     \
    ;                                                                                     \
  else                                                                                    \
    fatal_return ::testing::internal::AssertHelper(__FILE__, __LINE__, hlm_gtest_ar_.message()) = ::testing::Message()

#define HLM_GTEST_BOOL_(cond, text, fatal_return) \
  HLM_GTEST_CHECK_(::testing::internal::bool_result((cond), text), fatal_return)

#define EXPECT_TRUE(cond) HLM_GTEST_BOOL_(cond, #cond " is false", )
#define EXPECT_FALSE(cond) HLM_GTEST_BOOL_(!static_cast<bool>(cond), #cond " is true", )
#define ASSERT_TRUE(cond) HLM_GTEST_BOOL_(cond, #cond " is false", return)
#define ASSERT_FALSE(cond) HLM_GTEST_BOOL_(!static_cast<bool>(cond), #cond " is true", return)

#define HLM_GTEST_CMP_(a, b, op, fatal_return) \
  HLM_GTEST_CHECK_(::testing::internal::compare((a)op(b), #op, #a, #b, a, b), fatal_return)
#define EXPECT_EQ(a, b) HLM_GTEST_CMP_(a, b, ==, )
#define EXPECT_NE(a, b) HLM_GTEST_CMP_(a, b, !=, )
#define EXPECT_LT(a, b) HLM_GTEST_CMP_(a, b, <, )
#define EXPECT_LE(a, b) HLM_GTEST_CMP_(a, b, <=, )
#define EXPECT_GT(a, b) HLM_GTEST_CMP_(a, b, >, )
#define EXPECT_GE(a, b) HLM_GTEST_CMP_(a, b, >=, )
#define ASSERT_EQ(a, b) HLM_GTEST_CMP_(a, b, ==, return)
#define ASSERT_NE(a, b) HLM_GTEST_CMP_(a, b, !=, return)
#define ASSERT_LT(a, b) HLM_GTEST_CMP_(a, b, <, return)
#define ASSERT_LE(a, b) HLM_GTEST_CMP_(a, b, <=, return)
#define ASSERT_GT(a, b) HLM_GTEST_CMP_(a, b, >, return)
#define ASSERT_GE(a, b) HLM_GTEST_CMP_(a, b, >=, return)

#define EXPECT_NEAR(a, b, abs_error) \
  HLM_GTEST_CHECK_(::testing::internal::near(#a, #b, #abs_error, (a), (b), (abs_error)), )
#define ASSERT_NEAR(a, b, abs_error) \
  HLM_GTEST_CHECK_(::testing::internal::near(#a, #b, #abs_error, (a), (b), (abs_error)), return)

#define HLM_GTEST_THROW_(stmt, exc, fatal_return)                                                  \
  HLM_GTEST_CHECK_(([&]() -> ::testing::AssertionResult {                                          \
                     try {                                                                         \
                       stmt;                                                                       \
                     } catch (const exc&) {                                                        \
                       return ::testing::AssertionSuccess();                                       \
                     } catch (...) {                                                               \
                       return ::testing::AssertionFailure() << #stmt " threw another exception";   \
                     }                                                                             \
                     return ::testing::AssertionFailure() << #stmt " did not throw " #exc;         \
                   }()),                                                                           \
                   fatal_return)
#define EXPECT_THROW(stmt, exc) HLM_GTEST_THROW_(stmt, exc, )
#define ASSERT_THROW(stmt, exc) HLM_GTEST_THROW_(stmt, exc, return)

#define HLM_GTEST_NO_THROW_(stmt, fatal_return)                                                              \
  HLM_GTEST_CHECK_(([&]() -> ::testing::AssertionResult {                                                    \
                     try {                                                                                   \
                       stmt;                                                                                 \
                     } catch (const std::exception& e) {                                                     \
                       return ::testing::AssertionFailure() << #stmt " threw: " << e.what();                 \
                     } catch (...) {                                                                         \
                       return ::testing::AssertionFailure() << #stmt " threw a non-std exception";           \
                     }                                                                                       \
                     return ::testing::AssertionSuccess();                                                   \
                   }()),                                                                                     \
                   fatal_return)
#define EXPECT_NO_THROW(stmt) HLM_GTEST_NO_THROW_(stmt, )
#define ASSERT_NO_THROW(stmt) HLM_GTEST_NO_THROW_(stmt, return)

#define HLM_GTEST_CAT2_(a, b) a##b
#define HLM_GTEST_CAT_(a, b) HLM_GTEST_CAT2_(a, b)
#define SCOPED_TRACE(message) \
  const ::testing::internal::ScopedTrace HLM_GTEST_CAT_(hlm_gtest_trace_, __LINE__)(__FILE__, __LINE__, (message))

#define ADD_FAILURE() ::testing::internal::AssertHelper(__FILE__, __LINE__, "Failed") = ::testing::Message()
#define FAIL() return ADD_FAILURE()
#define SUCCEED() static_cast<void>(0)
#define GTEST_SKIP() return ::testing::internal::SkipHelper() = ::testing::Message()
