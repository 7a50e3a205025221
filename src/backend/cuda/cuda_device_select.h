// Which GPU the process-wide default context (cuda_context(), cuda_context.h) uses: device 0 unless chosen here
// before its first use. Data-parallel training (docs/distributed.md) runs one process per GPU of a node.
#pragma once

namespace hlm {

// Before the first cuda_context() call: a process that is rank `local_rank` among the ranks of its node uses GPU
// local_rank % (visible GPUs) (the NCCL communicator, dist/cuda/nccl_communicator.h, picks the same). Nothing when no
// GPU is visible; an internal error after cuda_context() was created on another device.
void cuda_context_select_for_local_rank(int local_rank);

// The GPU of the node's rank `local_rank`: local_rank % `devices` (devices > 0). The one rule both the default context
// above and the NCCL communicator follow.
inline int cuda_device_for_local_rank(int local_rank, int devices) { return local_rank % devices; }

}  // namespace hlm
