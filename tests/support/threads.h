// Thread-count independence check: runs f() with 1 and with 3 OpenMP threads; the results must be bitwise equal.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <vector>

namespace hlm::test {

template <typename F>
void expect_thread_independent(F f, const char* what) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = f();
  omp_set_num_threads(3);
  const auto three = f();
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_TRUE(std::equal(one.begin(), one.end(), three.begin())) << what << " depends on the thread count";
}

}  // namespace hlm::test
