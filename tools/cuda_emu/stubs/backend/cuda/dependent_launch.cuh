// Emulation stand-in for backend/cuda/dependent_launch.cuh (stubs/README.md): blocks run one after another, so the
// programmatic-launch trigger and wait have nothing to order.
#pragma once
namespace hlm::cuda {
inline void dependent_launch_trigger() {}
inline void dependent_launch_wait() {}
}  // namespace hlm::cuda
