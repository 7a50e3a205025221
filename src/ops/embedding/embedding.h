// Token embedding lookup: out[t, :] = table[ids[t], :] · multiplier (Granite: embedding_multiplier), CPU reference
// forward and backward. Shapes: table, d_table [V, D], ids [T] i32, out, d_out [T, D]. An id outside [0, V) is an input
// error naming the position.
//
// Backward: needs only d_out and ids (not the table). d_table[v, :] += multiplier · Σ_{t: ids[t] = v} d_out[t, :]
// (ACCUMULATED, like every parameter gradient, so micro-batches can be summed). Deterministic: tokens are bucketed by
// id (stable counting sort), each table row is one work item summed in token order in double, so the result does not
// depend on the thread count and repeated ids never race.
//
// The templates run the same code for T = float (the engine) and T = double (gradient checks); the float overload of
// the forward is the historical entry point and calls the float instantiation.
#pragma once
#include <cstdint>

namespace hlm {

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t T, int64_t V, int64_t D,
                       float multiplier = 1.0f);

template <typename T>
void embedding_forward(T* out, const T* table, const int32_t* ids, int64_t n, int64_t V, int64_t D,
                       double multiplier = 1.0);

template <typename T>
void embedding_backward(T* d_table, const T* d_out, const int32_t* ids, int64_t n, int64_t V, int64_t D,
                        double multiplier = 1.0);

}  // namespace hlm
