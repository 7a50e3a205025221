# Project-wide warning flags; warnings are errors only in CI-like strict builds (HYBRIDLM_WERROR).
option(HYBRIDLM_WERROR "Treat warnings as errors" OFF)
function(hlm_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(HYBRIDLM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
