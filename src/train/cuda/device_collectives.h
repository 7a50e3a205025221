// DeviceCollectives: the communicator's sums and gathers (dist/communicator.h) on DEVICE buffers of the GPU trainer,
// whichever way the bytes travel between ranks (issue #25, docs/distributed.md):
//   nccl  an NcclCommunicator (dist/cuda/nccl_communicator.h) moves device buffers directly (one GPU per rank; NCCL
//         refuses two ranks on one GPU). Built where CUDA, MPI and NCCL are found.
//   host  the host communicator (MPI, or one process) moves copies staged through pinned host memory: slower, but it
//         runs several ranks on ONE GPU (the 2-rank equivalence test on the single-GPU machine) and needs no NCCL.
// HYBRIDLM_GPU_COLLECTIVES=nccl|host picks one (default nccl where built, else host); the trainer also takes the
// variable's presence as the request to run the data-parallel path with a single rank (tests, overhead figures).
// Contract of every call: the rank-order sums and chunking of communicator.h, bit for bit whichever backend. Inputs are
// read after everything queued so far on ctx's stream has run (the call waits for the stream first); on return the
// results are in device memory and later work on ctx's stream sees them. The calls block the host (the NCCL
// communicator waits on its own stream).
// Queued jobs (the overlap of the gradient sums with the backward, HYBRIDLM_DP_OVERLAP, cuda_data_parallel.h): submit
// queues one bucket's sum behind an event of ctx's stream and returns at once; the job runs on the collectives' OWN
// stream (nccl: the communicator's stream, the rank-order sum kernel included; host: a stream of a helper thread that
// copies to pinned memory, waits for the copy, calls the host communicator, copies back), so ctx's stream goes on
// with the backward meanwhile. Jobs run in submission order, the same collectives and sums as the blocking calls (the
// same bits). finish() waits for all of them; no blocking call and no other call of the host communicator may come
// between the first submit and finish (the helper thread is then the only one calling MPI: MPI_THREAD_SERIALIZED).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "backend/cuda/cuda_context.h"
#include "dist/communicator.h"

namespace hlm {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual const char* backend() const = 0;  // "nccl" or "host"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // recv: chunk_size(n, W, rank) elements; chunk `rank` of the sum.
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t n) = 0;
  // send: this rank's chunk (may alias recv + chunk_begin(n, W, rank)); recv: n elements, every chunk.
  virtual void all_gather(const float* send, float* recv, size_t n) = 0;

  // One queued bucket sum: after `ready` (an event recorded on ctx's stream), on the collectives' stream, pack(s),
  // then reduce_scatter_sum(data, recv, n) when recv is set, else all_reduce_sum(data, n) in place, then unpack(s).
  // pack and unpack (may be empty) queue device copies on the stream they are given.
  struct Job {
    cudaEvent_t ready = nullptr;
    std::function<void(cudaStream_t)> pack, unpack;
    float* data = nullptr;
    float* recv = nullptr;
    size_t n = 0;
  };
  // Whether submit can run jobs concurrently with the host (host staging over MPI needs MPI_THREAD_SERIALIZED).
  virtual bool can_queue() const = 0;
  virtual void submit(Job job) = 0;
  // The host waits until every submitted job has run (a helper's error is rethrown here; NCCL errors and the timeout
  // end the job as in the blocking calls); later work on ctx's stream then sees the results.
  virtual void finish() = 0;
};

// The collectives HYBRIDLM_GPU_COLLECTIVES names over `host` (MpiCommunicator or SingleCommunicator, which must
// outlive the result). Input error for an unknown name or nccl in a build without NCCL.
std::unique_ptr<DeviceCollectives> make_device_collectives(CudaContext& ctx, Communicator& host);

}  // namespace hlm
