// Per-sequence state rows on CUDA: the gather/scatter an inference engine uses to run a step's sequences (in batch
// order) against state pools indexed by sequence slot (GDN conv and recurrent states, [slots, row] each). A plain
// copy, so no CPU reference op: the CPU engine does the same with std::copy_n (infer/cpu_engine.cpp).
//   dst row (dst_rows ? dst_rows[i] : i) ← src row (src_rows ? src_rows[i] : i) for i < n_rows, exact.
// fp32 rows of row_elements floats; index arrays int32 on the device (nullable = identity); rows may not overlap
// between dst and src. Queued on `stream`, no synchronization, no allocation.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace hlm {

void state_rows_copy_cuda(float* dst, const int32_t* dst_rows, const float* src, const int32_t* src_rows,
                          int64_t n_rows, int64_t row_elements, cudaStream_t stream);

}  // namespace hlm
