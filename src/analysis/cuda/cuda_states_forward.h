// The model forward of `hybridlm align --device cuda` on GPU 0: a StatesForward (analysis/sentence_states.h) over a
// CudaModel uploaded once, so each unit's packed forward runs on the GPU and only the wanted per-layer capture points
// come back ([T, hidden] f32 host tensors, as the CPU forward hands them out). Built only with the CUDA backend
// (hlm_cuda_exec).
// Numerics: CudaModel::forward's (docs/cuda.md; ≤ ~5e-6 relative to the CPU's states on the goldens); SoftCKA from
// these states matches the CPU path within ~1e-5 absolute (docs/analysis.md).
// Non-goals: keeping the states on the device for the SoftCKA engine (they go through the host, where align packs
// them per batch of cells).
#pragma once
#include "analysis/sentence_states.h"
#include "models/model.h"

namespace hlm {

// Uploads `model` (input error naming the reason when no usable GPU is present); the returned function owns the
// device copy and may outlive `model`.
StatesForward make_cuda_states_forward(const Model& model);

}  // namespace hlm
