// Private: the per-chunk stages of the chunked gated delta rule (gdn.md §2), shared by the chunked forward and
// backward. One chunk = c ≤ C consecutive tokens of one sequence and one v-head, positions i = 0..c-1.
// Storage is float (as in the CUDA kernels); every dot product and the triangular solve accumulate in double.
//
//   γ_i = Σ_{j≤i} g_j (chunk-local);  Γ_ij = e^{γ_i − γ_j} for j ≤ i, 0 above the diagonal
//   L_ij = β_i Γ_ij (k_i·k_j) for j < i;  R = (I + L)^-1 (forward substitution, unit lower triangular)
//   W = R diag(β e^γ) K [c, dk];  Ũ = R diag(β) V [c, dv];  U = Ũ − W M0ᵀ [c, dv]  (M0 = state entering the chunk)
//   O_i = scale · (e^{γ_i} M0 q_i + Σ_{j≤i} (q_i·k_j) Γ_ij U_j);   M_C = e^{γ_{c-1}} M0 + Σ_i e^{γ_{c-1} − γ_i} U_i k_iᵀ
#pragma once
#include <cstdint>
#include <vector>

#include "ops/gated_delta_rule/gated_delta_rule.h"

namespace hlm::gdn_detail {

struct Chunk {
  int64_t c = 0;                      // valid positions
  std::vector<float> q, k;            // [c, dk] gathered rows
  std::vector<float> v;               // [c, dv]
  std::vector<float> beta, gamma;     // [c]
  std::vector<float> decay_in;        // [c]  e^{γ_i}          (exponent γ_i − γ_start, γ_start = 0)
  std::vector<float> decay_out;       // [c]  e^{γ_{c-1} − γ_i}
  std::vector<float> Gam;             // [c, c] Γ (lower incl. diagonal, 0 above)
  std::vector<float> KK, QK;          // [c, c] k_i·k_j and q_i·k_j (full)
  std::vector<float> L, R;            // [c, c]
  std::vector<float> W, Ut, U;        // [c, dk], [c, dv], [c, dv]
};

// Gathers the chunk's inputs (tokens [t0, t0 + c), v-head h) and computes γ, Γ, KK, QK, L, R, W and Ũ.
void chunk_prepare(Chunk& ch, const GdnInputs<float>& in, const GdnShape& s, int64_t t0, int64_t c, int64_t h);
// U = Ũ − W M0ᵀ for the state M0 [dv, dk] entering the chunk.
void chunk_write_vectors(Chunk& ch, const float* M0, const GdnShape& s);
// M [dv, dk] ← e^{γ_{c-1}} M + Σ_i e^{γ_{c-1} − γ_i} U_i k_iᵀ (in place; needs U).
void chunk_advance_state(float* M, const Chunk& ch, const GdnShape& s);

inline double dot(const float* a, const float* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return acc;
}

}  // namespace hlm::gdn_detail
