# Unity (jumbo) builds: the C++ files of a target are compiled in batches of HYBRIDLM_UNITY_BATCH_SIZE, each batch one
# translation unit, so the headers every file includes (nlohmann/json, CLI11, GoogleTest, the standard library) are
# parsed, instantiated and optimised once per batch instead of once per file. CI and `make demo` build from scratch
# on 2 cores; figures in docs/reliability.md ("CI time") and docs/results/s15-2026-12-02/unity/.
#   -DHYBRIDLM_UNITY=ON   what the Makefile passes for the builds made from scratch: `make test` / `make build` (CI),
#                         `make demo`, `make test-sanitize` and `make test-sanitize-ci`.
#   OFF (the default)     one translation unit per file: a developer's incremental build recompiles one file, not a
#                         batch of eight, and ccache caches every file.
# The batches are fixed by the file order (sorted globs) and the batch size, so a build is deterministic. Files that
# define a helper with internal linkage (anonymous namespace or `static`) under a name another file of the same
# target also defines or uses unqualified are kept out of the batches (SKIP_UNITY_BUILD_INCLUSION), found at configure
# time by cmake/unity_collisions.py: batched together, two `sigmoid` helpers either fail to compile or silently become
# overloads of each other, and a file's `kCases` that means a header's becomes ambiguous. The scan is textual (not a
# C++ parser) and errs on the side of keeping files out: a local variable of a helper's name counts too. ctest's
# unity_collisions checks the batched files again (an edit after configuring).
# CUDA files (.cu) are never batched (CMake 3.25 batches C and C++ only).
option(HYBRIDLM_UNITY "Compile the C++ files of each target in batches (unity build)" OFF)
set(HYBRIDLM_UNITY_BATCH_SIZE 8 CACHE STRING "Files per unity batch")
set(HLM_UNITY_ACTIVE OFF)
if(HYBRIDLM_UNITY)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    set(HLM_UNITY_ACTIVE ON)
  else()
    message(STATUS "hybridlm unity build: off (no python3 to find helper name collisions)")
  endif()
endif()
message(STATUS "hybridlm unity build: ${HLM_UNITY_ACTIVE} (batches of ${HYBRIDLM_UNITY_BATCH_SIZE})")
set(HLM_UNITY_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/unity_collisions.py)

# hlm_unity(target): batch the target's C++ files, except those whose internal names collide with an earlier file's.
function(hlm_unity target)
  if(NOT HLM_UNITY_ACTIVE)
    return()
  endif()
  get_target_property(srcs ${target} SOURCES)
  get_target_property(dir ${target} SOURCE_DIR)
  set(cxx)
  foreach(s ${srcs})
    if(s MATCHES "\\.(cpp|cc|cxx)$")
      get_filename_component(abs ${s} ABSOLUTE BASE_DIR ${dir})
      list(APPEND cxx ${abs})
    endif()
  endforeach()
  list(LENGTH cxx n)
  if(n LESS 2)
    return()
  endif()
  execute_process(COMMAND ${Python3_EXECUTABLE} ${HLM_UNITY_SCRIPT} skip ${cxx} OUTPUT_VARIABLE skip
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake/unity_collisions.py failed on ${target} (rc ${rc})")
  endif()
  if(skip)
    set_source_files_properties(${skip} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    list(LENGTH skip nskip)
    message(VERBOSE "hybridlm unity build: ${target} keeps ${nskip} of ${n} files out of its batches")
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${HYBRIDLM_UNITY_BATCH_SIZE})
  foreach(s ${cxx})
    if(NOT s IN_LIST skip)
      set_property(GLOBAL APPEND PROPERTY HLM_UNITY_BATCHED "${target}\t${s}\n")
    endif()
  endforeach()
endfunction()

# hlm_unity_check(): after every target is defined, the ctest check (label cpu) over what was batched.
function(hlm_unity_check)
  if(NOT HLM_UNITY_ACTIVE OR NOT BUILD_TESTING)
    return()
  endif()
  get_property(lines GLOBAL PROPERTY HLM_UNITY_BATCHED)
  string(REPLACE ";" "" lines "${lines}")
  file(WRITE ${CMAKE_BINARY_DIR}/unity_batched.tsv "${lines}")
  add_test(NAME unity_collisions
           COMMAND ${Python3_EXECUTABLE} ${HLM_UNITY_SCRIPT} check ${CMAKE_BINARY_DIR}/unity_batched.tsv)
  set_tests_properties(unity_collisions PROPERTIES LABELS cpu)
endfunction()
