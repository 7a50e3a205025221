// Kept activations for training without recomputation.
//
// By default a layer's backward recomputes the layer's forward from its input (per-layer activation recomputation:
// the trainer keeps only the residual stream between layers). Given a LayerStash, a layer's forward instead leaves
// the intermediates its backward needs in stash.arena and records where they are; the backward, given the same
// stash, reads them and skips the recomputation. Both paths run the same float operations in the same order, so the
// gradients are bit-identical; the stash trades memory (see each layer's header for what it keeps) for about one
// layer forward of compute per layer.
//
// Contract: `buffers` is written by the layer's forward only (its layout is private to that layer's .cpp); `output`
// is a copy of the layer's output (post-norm blocks need it in the backward). Everything lives until the caller
// resets `arena`, which must outlive the backward that reads the stash.
#pragma once
#include <vector>

#include "core/arena.h"

namespace hlm {

struct LayerStash {
  Arena* arena = nullptr;       // where kept buffers are allocated (owned by the caller)
  std::vector<float*> buffers;  // the layer's intermediates, in the order its .cpp defines; empty until its forward
  float* output = nullptr;      // [T, hidden] copy of the layer's output
  bool filled() const { return !buffers.empty(); }
};

}  // namespace hlm
