// Emulation stand-in for <cuda_runtime.h> (stubs/README.md), and the device intrinsics it brings that emu.h lacks.
#pragma once
#include <cmath>

#include "cuda_bf16.h"
#ifndef HLM_EMU_FMAF_RN  // also in emu.h (either may come first)
#define HLM_EMU_FMAF_RN
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }  // one rounding, as on the GPU
#endif
