// Emulation stand-in for backend/cuda/cuda_common.cuh (stubs/README.md): the device helpers the attention headers use,
// host atomics behind one mutex (the emulated blocks' threads run concurrently), plain loads for __ldcg / __ldcs.
#pragma once
#include <mutex>

#include "cuda_bf16.h"
inline std::mutex g_emu_atomics;
inline int atomicOr(int* p, int v) {
  std::lock_guard<std::mutex> l(g_emu_atomics);
  const int o = *p;
  *p |= v;
  return o;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  std::lock_guard<std::mutex> l(g_emu_atomics);
  const unsigned o = *p;
  *p += v;
  return o;
}
inline void __threadfence() {}
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
// `__shared__ __align__(16) float x[..]` becomes `static <attribute> float x[..]`: a GNU attribute may stand there.
#undef __align__
#define __align__(n) __attribute__((aligned(n)))
namespace hlm::cuda {
inline float quiet_nan() { return __uint_as_float(0x7fc00000u); }
}  // namespace hlm::cuda
