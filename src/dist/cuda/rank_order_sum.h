// Device half of NcclCommunicator's reductions: out[i] = ((pieces[0][i] + pieces[1][i]) + ...) + pieces[W-1][i], the
// rank-order sum of communicator.h, for W pieces of `count` elements laid end to end. Runs on `stream` (a
// cudaStream_t passed as void*, so that this header needs no CUDA headers); no synchronisation.
#pragma once
#include <cstddef>

namespace hlm {

void rank_order_sum_f32(const float* pieces, int world, size_t count, float* out, void* stream);
void rank_order_sum_f64(const double* pieces, int world, size_t count, double* out, void* stream);

}  // namespace hlm
