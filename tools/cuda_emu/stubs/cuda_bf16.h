// Emulation stand-in for <cuda_bf16.h> (stubs/README.md): emu_mma.h's bf16 and the one conversion it lacks.
#pragma once
#include "emu_mma.h"
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
