// Copyright LayerPS authors. Licensed under Apache-2.0.
//
// GoogleTest when the build found it (LAYERPS_CUDA_TEST_GTEST=1); otherwise a tiny
// stand-in with the subset of its macros that packing_cuda_test.cc uses, so the GPU test
// still builds on a machine with only the CUDA toolkit. Either way, RunAllTests()
// returns 0 when every test passed or was skipped.
#ifndef PS_CUDA_TESTS_TEST_FRAMEWORK_H_
#define PS_CUDA_TESTS_TEST_FRAMEWORK_H_

#if LAYERPS_CUDA_TEST_GTEST

#include <gtest/gtest.h>

inline int RunAllTests(int* argc, char** argv) {
  ::testing::InitGoogleTest(argc, argv);
  return RUN_ALL_TESTS();
}

#else  // the built-in runner

#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace mini_test {

struct State {
  bool failed = false;
  bool skipped = false;
  std::vector<std::string> traces;
};

inline State& Current() {
  static State state;
  return state;
}

struct Case {
  const char* suite;
  const char* name;
  void (*fn)();
};

inline std::vector<Case>& Registry() {
  static std::vector<Case> cases;
  return cases;
}

struct Registrar {
  Registrar(const char* suite, const char* name, void (*fn)()) {
    Registry().push_back({suite, name, fn});
  }
};

struct Message {
  std::ostringstream out;
  template <typename T>
  Message& operator<<(const T& v) {
    out << v;
    return *this;
  }
};

struct Failure {
  const char* file;
  int line;
  std::string what;
  void operator=(const Message& m) const {
    Current().failed = true;
    std::cout << file << ":" << line << ": Failure: " << what << "\n";
    const std::string user = m.out.str();
    if (!user.empty()) std::cout << "  " << user << "\n";
    for (const auto& t : Current().traces) std::cout << "  trace: " << t << "\n";
  }
};

struct Skip {
  void operator=(const Message& m) const {
    Current().skipped = true;
    std::cout << "  skipped: " << m.out.str() << "\n";
  }
};

struct ScopedTrace {
  explicit ScopedTrace(const std::string& s) { Current().traces.push_back(s); }
  ~ScopedTrace() { Current().traces.pop_back(); }
};

template <typename A, typename B, typename Op>
std::string Check(const A& a, const B& b, Op op, const char* ea, const char* eb, const char* ops) {
  if (op(a, b)) return std::string();
  std::ostringstream s;
  s << ea << " " << ops << " " << eb << " (" << +a << " vs " << +b << ")";
  return s.str();
}

inline std::string CheckTrue(bool c, const char* e) {
  return c ? std::string() : std::string("expected true: ") + e;
}

inline int RunAll(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_filter=", 15) == 0) filter = argv[i] + 15;
  }
  int failed = 0, skipped = 0, passed = 0;
  for (const Case& c : Registry()) {
    const std::string full = std::string(c.suite) + "." + c.name;
    if (!filter.empty() && full.find(filter) == std::string::npos) continue;
    Current() = State();
    std::cout << "[ RUN      ] " << full << std::endl;
    c.fn();
    if (Current().failed) {
      ++failed;
      std::cout << "[  FAILED  ] " << full << std::endl;
    } else if (Current().skipped) {
      ++skipped;
      std::cout << "[  SKIPPED ] " << full << std::endl;
    } else {
      ++passed;
      std::cout << "[       OK ] " << full << std::endl;
    }
  }
  std::cout << "[==========] " << passed << " passed, " << skipped << " skipped, " << failed
            << " failed (built-in runner)" << std::endl;
  return failed == 0 ? 0 : 1;
}

}  // namespace mini_test

#define MINI_TEST_CAT_(a, b) a##b
#define TEST(suite, name)                                                   \
  static void MINI_TEST_CAT_(suite##_, name##_Test)();                      \
  static ::mini_test::Registrar MINI_TEST_CAT_(suite##_, name##_registrar)( \
      #suite, #name, &MINI_TEST_CAT_(suite##_, name##_Test));               \
  static void MINI_TEST_CAT_(suite##_, name##_Test)()

#define MINI_TEST_REPORT_(msg_expr, ret)                                       \
  if (const std::string mini_test_msg_ = (msg_expr); mini_test_msg_.empty()) { \
  } else                                                                       \
    ret ::mini_test::Failure{__FILE__, __LINE__, mini_test_msg_} = ::mini_test::Message()

#define MINI_TEST_CMP_(a, b, op, ret)                                                           \
  MINI_TEST_REPORT_(                                                                            \
      ::mini_test::Check((a), (b), [](const auto& x, const auto& y) { return x op y; }, #a, #b, \
                         #op),                                                                  \
      ret)

#define ASSERT_TRUE(c) MINI_TEST_REPORT_(::mini_test::CheckTrue(static_cast<bool>(c), #c), return )
#define ASSERT_FALSE(c) MINI_TEST_REPORT_(::mini_test::CheckTrue(!(c), "!(" #c ")"), return )
#define EXPECT_TRUE(c) MINI_TEST_REPORT_(::mini_test::CheckTrue(static_cast<bool>(c), #c), )
#define ASSERT_EQ(a, b) MINI_TEST_CMP_(a, b, ==, return )
#define ASSERT_NE(a, b) MINI_TEST_CMP_(a, b, !=, return )
#define ASSERT_LT(a, b) MINI_TEST_CMP_(a, b, <, return )
#define ASSERT_LE(a, b) MINI_TEST_CMP_(a, b, <=, return )
#define EXPECT_EQ(a, b) MINI_TEST_CMP_(a, b, ==, )
#define GTEST_SKIP() return ::mini_test::Skip() = ::mini_test::Message()
#define SCOPED_TRACE(msg) ::mini_test::ScopedTrace MINI_TEST_CAT_(mini_trace_, __LINE__)(msg)

inline int RunAllTests(int* argc, char** argv) { return ::mini_test::RunAll(*argc, argv); }

#endif  // LAYERPS_CUDA_TEST_GTEST

#endif  // PS_CUDA_TESTS_TEST_FRAMEWORK_H_
