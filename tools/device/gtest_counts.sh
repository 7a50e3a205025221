#!/usr/bin/env bash
# gtest_counts.sh: counts and verdict of one GoogleTest log (real GoogleTest or the stand-in tests/cuda/gtest_shim:
# same lines), for the device scripts (run_cuda_tests.sh, run_suites.sh). Source it, then:
#   gtest_counts LOG [EXIT_STATUS]
# prints one line "run R, passed P, failed F, skipped S, unfinished U -> PASS|FAIL (reason)" and returns 0 for PASS,
# 1 for FAIL. On the GPU machine a skip always means "CUDA unavailable" (the only GTEST_SKIP in tests/cuda and
# tests/cuda_models), so the verdict is FAIL when no test ran, when any test skipped, failed or did not finish (a
# [ RUN ] line without its result: a crash or a timeout), or when EXIT_STATUS (the test program's) is not 0.
# Only per-test result lines, which carry "(N ms)", are counted; GoogleTest's closing summary repeats the names
# without it.
gtest_counts() {
  local log="$1" status="${2:-0}" run passed failed skipped unfinished reason=""
  run=$(grep -cE '^\[ RUN      \] [^ ]+$' "$log")
  passed=$(grep -cE '^\[       OK \] [^ ]+ \([0-9]+ ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] [^ ]+(, where .*)? \([0-9]+ ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)$' "$log")
  unfinished=$(( run - passed - failed - skipped ))
  if [ "$run" -eq 0 ]; then reason="no test ran"
  elif [ "$failed" -gt 0 ]; then reason="$failed failed"
  elif [ "$unfinished" -gt 0 ]; then reason="$unfinished did not finish"
  elif [ "$skipped" -gt 0 ]; then reason="$skipped skipped (no usable GPU)"
  elif [ "$status" != "0" ]; then reason="exit status $status"
  fi
  if [ -z "$reason" ]; then
    echo "run $run, passed $passed, failed $failed, skipped $skipped, unfinished $unfinished -> PASS"
    return 0
  fi
  echo "run $run, passed $passed, failed $failed, skipped $skipped, unfinished $unfinished -> FAIL ($reason)"
  return 1
}
