# Sanitizer and fuzzing builds (docs/reliability.md). Each wants its own build directory:
#   -DHYBRIDLM_SANITIZE=ON  AddressSanitizer + UndefinedBehaviorSanitizer on every C/C++ target (any compiler; `make
#                           test-sanitize` builds build-asan with it and runs the CPU suite).
#   -DHYBRIDLM_FUZZ=ON      clang only: the same sanitizers plus libFuzzer's coverage instrumentation on every library,
#                           and the fuzz targets in fuzz/ (`make fuzz`, build dir build-fuzz).
# UBSan findings abort (-fno-sanitize-recover), so a report fails the test or stops the fuzzer like a crash does.
option(HYBRIDLM_SANITIZE "Build everything with -fsanitize=address,undefined" OFF)
option(HYBRIDLM_FUZZ "Build the libFuzzer targets in fuzz/ (clang; implies the sanitizers)" OFF)
if(HYBRIDLM_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "HYBRIDLM_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                      "-DCMAKE_C_COMPILER=clang, as `make fuzz` does")
endif()
if(HYBRIDLM_SANITIZE OR HYBRIDLM_FUZZ)
  set(hlm_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${hlm_sanitize_flags}>")
  add_link_options(-fsanitize=address,undefined)
endif()
if(HYBRIDLM_FUZZ)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()
