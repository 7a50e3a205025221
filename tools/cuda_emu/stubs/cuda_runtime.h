// Emulation stand-in for <cuda_runtime.h> (stubs/README.md).
#pragma once
#include "cuda_bf16.h"
