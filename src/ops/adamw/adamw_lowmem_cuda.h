// The low-memory AdamW step on CUDA (contract and arithmetic: adamw_lowmem.h): 8-bit block-wise moments and/or a
// bf16 master parameter with stochastic rounding, with the bits of adamw_lowmem_step_ref (tests/cuda/
// cases_adamw_lowmem.cpp checks them bit for bit). One warp per quantization block (a persistent grid of a few CUDA
// blocks per multiprocessor walks them): each lane updates 8 of its elements (8 consecutive ones, with vector loads
// and stores, in a full block of aligned rows), the warp takes the absmax of the new m and v (a max: order-free, so
// deterministic) and writes the codes. The code tables live in device
// memory, copied from the host tables on first use, and each CUDA block reads them from shared memory.
// Only .cu files and host code in cuda/ folders include this header.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/adamw/adamw_lowmem.h"

namespace hlm {

// Pointers as AdamWLowmemTensor, on the device (param_bf16: the bf16 bits, uint16_t).
using AdamWLowmemCudaTensor = AdamWLowmemTensor;

// One update of t's n elements on `stream`. scale: device float [1] or nullptr (= 1; not finite: nothing written).
void adamw_lowmem_step_cuda(const AdamWLowmemCudaTensor& t, const float* scale, const AdamWLowmemStep& s,
                            cudaStream_t stream);
// Block quantization / dequantization of a device tensor (checkpoints, plan conversion, tests).
void q8_quantize_cuda(bool is_signed, const float* x, int64_t n, uint8_t* q, float* absmax, cudaStream_t stream);
void q8_dequantize_cuda(bool is_signed, const uint8_t* q, const float* absmax, int64_t n, float* x,
                        cudaStream_t stream);

}  // namespace hlm
