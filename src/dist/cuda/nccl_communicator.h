// NcclCommunicator: communicator.h over NCCL for DEVICE buffers (issue #25, docs/distributed.md).
//
// Bootstrap: `host` (an MpiCommunicator under mpirun/srun, or a SingleCommunicator for one rank) gives rank, size and
// local rank; the device is local_rank % (visible devices); rank 0's ncclUniqueId is broadcast over `host`; the NCCL
// communicator is created NON-BLOCKING (ncclConfig_t::blocking = 0), so that no NCCL call can block forever.
// Reductions keep the rank-order contract: grouped ncclSend/ncclRecv deliver chunk r of every rank's buffer to rank
// r (an all-to-all), a kernel adds the W pieces in rank order (rank_order_sum.h), and all_reduce_sum sends the
// reduced chunks back to every rank (grouped ncclSend/ncclRecv, since chunks may differ by one element and
// ncclAllGather needs equal counts). broadcast is ncclBroadcast, barrier an ncclAllReduce of one float.
// One rank: all_reduce_sum does nothing and reduce_scatter_sum is a device copy (the sum over one rank); NCCL is not
// called for them (a self send/recv would copy the buffer twice more: +4 % on a GPU training step, H200 2026-12-02).
// Every collective is enqueued on this communicator's own stream and waited for: cudaStreamQuery and
// ncclCommGetAsyncError are polled (spinning for 200 µs, then 50 µs sleeps) until the stream is done; an NCCL error (a peer died, a network
// error) or the timeout (HYBRIDLM_COLLECTIVE_TIMEOUT, default 600 s) calls ncclCommAbort and then host.abort(), which
// ends every rank with the message. Scratch: W chunk-sized pieces (grown on demand, device memory).
// Queued calls (the GPU trainer's overlap of the gradient sums with the backward, HYBRIDLM_DP_OVERLAP): the same
// collectives, the same rank-order sums and chunking, queued on the communicator's own stream behind whatever the
// caller queued there (e.g. a cudaStreamWaitEvent on the compute stream's event and the bucket's packing copies),
// without the host waiting; wait_queued then waits for all of it with the same error and timeout handling.
// Built only with CUDA and MPI (CMake target hlm_dist_nccl); the GPU trainer uses it through
// train/cuda/device_collectives.h.
#pragma once
#include <cstddef>
#include <memory>

#include "dist/communicator.h"

namespace hlm {

class NcclDeviceCommunicator : public Communicator {
 public:
  // The communicator's own stream (a cudaStream_t, as void* so that this header needs no CUDA headers).
  virtual void* stream() const = 0;
  // all_reduce_sum / reduce_scatter_sum queued on stream(); the host does not wait (wait_queued does).
  virtual void all_reduce_sum_queued(float* data, size_t n) = 0;
  virtual void reduce_scatter_sum_queued(const float* send, float* recv, size_t n) = 0;
  // Until stream() has run everything queued on it; NCCL errors and the timeout end the job.
  virtual void wait_queued(const char* what) = 0;
};

// `host` must outlive the result. Input error when this process sees no CUDA device.
std::unique_ptr<NcclDeviceCommunicator> make_nccl_communicator(Communicator& host);

}  // namespace hlm
