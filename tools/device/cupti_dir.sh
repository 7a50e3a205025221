# cupti_dir.sh: where the GPU machine keeps libcupti.so.13, the library the kernel tracer (libhlm_kernel_trace.so,
# docs/profiling.md) needs at run time (sourced, not run):
#   cupti_dir   prints the folder (the toolkit's copies first, then the pip package nvidia-cuda-cupti of torch's
#               environment, then anywhere under /), or nothing when there is none; put it on LD_LIBRARY_PATH
cupti_dir() {
  local so
  so=$(ls /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 2>/dev/null | head -1)
  [ -n "$so" ] || so=$(find "$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || echo /nonexistent)" \
    -name 'libcupti.so.13' 2>/dev/null | head -1)
  [ -n "$so" ] || so=$(find / -name 'libcupti.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
  [ -n "$so" ] && dirname "$so"
}
