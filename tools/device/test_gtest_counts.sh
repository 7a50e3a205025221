#!/usr/bin/env bash
# Checks gtest_counts.sh (the verdict of the device scripts) on crafted GoogleTest logs: a clean GPU run passes; no
# test, every GPU test skipped, some skipped, a failure (also of a parameterized test), a crash mid-test and a
# non-zero exit each give FAIL. Run by ctest (device_log_verdict, label cpu): exit 0 when every case gives its verdict.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/gtest_counts.sh"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
bad=0
# check NAME WANT(PASS|FAIL) EXIT_STATUS EXPECTED_COUNTS < log
check() {
  cat >"$dir/$1.log"
  local line
  line="$(gtest_counts "$dir/$1.log" "$3")"
  local verdict="${line##*-> }"
  verdict="${verdict%% *}"
  if [ "$verdict" != "$2" ] || [[ "$line" != "$4"* ]]; then
    echo "FAIL $1: got '$line', want '$4 ... -> $2'"
    bad=1
  else
    echo "ok   $1: $line"
  fi
}

check clean PASS 0 "run 2, passed 2, failed 0, skipped 0, unfinished 0" <<'LOG'
[==========] Running 2 tests from 1 test suite.
[ RUN      ] RmsnormCuda.Forward
[check] rmsnorm fwd max abs 1.2e-07 OK
[       OK ] RmsnormCuda.Forward (12 ms)
[ RUN      ] CudaBackend.AvailabilityNeverThrows
[       OK ] CudaBackend.AvailabilityNeverThrows (0 ms)
[==========] 2 tests from 1 test suite ran. (12 ms total)
[  PASSED  ] 2 tests.
LOG
check nothing_ran FAIL 0 "run 0, passed 0, failed 0, skipped 0" <<'LOG'
[==========] Running 0 tests from 0 test suites.
[==========] 0 tests from 0 test suites ran. (0 ms total)
[  PASSED  ] 0 tests.
LOG
check all_skipped FAIL 0 "run 2, passed 0, failed 0, skipped 2" <<'LOG'
[ RUN      ] RmsnormCuda.Forward
tests/cuda/cases_rmsnorm.cpp:20: Skipped
CUDA unavailable: no usable CUDA driver
[  SKIPPED ] RmsnormCuda.Forward (0 ms)
[ RUN      ] SwigluCuda.Forward
[  SKIPPED ] SwigluCuda.Forward (0 ms)
[  PASSED  ] 0 tests.
[  SKIPPED ] 2 tests, listed below:
[  SKIPPED ] RmsnormCuda.Forward
[  SKIPPED ] SwigluCuda.Forward
LOG
check host_only_passed FAIL 0 "run 2, passed 1, failed 0, skipped 1" <<'LOG'
[ RUN      ] CudaBackend.AvailabilityNeverThrows
[       OK ] CudaBackend.AvailabilityNeverThrows (0 ms)
[ RUN      ] RmsnormCuda.Forward
[  SKIPPED ] RmsnormCuda.Forward (0 ms)
[  PASSED  ] 1 test.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] RmsnormCuda.Forward
LOG
check one_failed FAIL 1 "run 3, passed 1, failed 2, skipped 0" <<'LOG'
[ RUN      ] RmsnormCuda.Forward
[       OK ] RmsnormCuda.Forward (3 ms)
[ RUN      ] SwigluCuda.Forward
tests/cuda/cases_swiglu.cpp:40: Failure
[  FAILED  ] SwigluCuda.Forward (5 ms)
[ RUN      ] Files/Gdn.Matches/dk64
[  FAILED  ] Files/Gdn.Matches/dk64, where GetParam() = dk 64 (7 ms)
[  PASSED  ] 1 test.
[  FAILED  ] 2 tests, listed below:
[  FAILED  ] SwigluCuda.Forward
[  FAILED  ] Files/Gdn.Matches/dk64, where GetParam() = dk 64

 2 FAILED TESTS
LOG
check crashed FAIL 134 "run 2, passed 1, failed 0, skipped 0, unfinished 1" <<'LOG'
[ RUN      ] RmsnormCuda.Forward
[       OK ] RmsnormCuda.Forward (3 ms)
[ RUN      ] AttentionCuda.BackwardF32
terminate called after throwing an instance of 'hlm::Error'
LOG
check bad_exit FAIL 1 "run 1, passed 1, failed 0, skipped 0, unfinished 0" <<'LOG'
[ RUN      ] RmsnormCuda.Forward
[       OK ] RmsnormCuda.Forward (3 ms)
LOG
exit $bad
