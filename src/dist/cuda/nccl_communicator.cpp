// NcclCommunicator (contract in nccl_communicator.h).
#include "dist/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_device_select.h"
#include "core/error.h"
#include "dist/cuda/rank_order_sum.h"
#include "dist/mpi_communicator.h"

namespace hlm {

namespace {

template <typename T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
ncclDataType_t nccl_type<double>() { return ncclFloat64; }

class NcclCommunicator final : public NcclDeviceCommunicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host), timeout_(collective_timeout_seconds()) {
    int devices = 0;
    HLM_CHECK_INPUT(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0,
                    "NCCL communicator: this process sees no CUDA device");
    device_ = cuda_device_for_local_rank(host_.local_rank(), devices);
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id{};
    if (host_.rank() == 0) enqueue(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_.broadcast(&id, sizeof id, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns; wait() polls for completion and errors
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, host_.size(), id, host_.rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) fail("ncclCommInitRankConfig", r);
    settle("ncclCommInitRankConfig");
  }
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (pieces_ != nullptr) cudaFree(pieces_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* backend() const override { return "nccl"; }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }

  void all_reduce_sum(float* data, size_t n) override {
    all_reduce(data, n);
    wait("all-reduce");
  }
  void all_reduce_sum(double* data, size_t n) override {
    all_reduce(data, n);
    wait("all-reduce");
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    reduce_scatter_sum_queued(send, recv, n);
    wait("reduce-scatter");
  }
  void* stream() const override { return stream_; }
  void all_reduce_sum_queued(float* data, size_t n) override { all_reduce(data, n); }
  void reduce_scatter_sum_queued(const float* send, float* recv, size_t n) override {
    if (size() == 1) {  // the rank-order sum of one rank is its buffer: a copy (all_reduce does nothing likewise)
      if (n > 0 && send != recv)
        cuda(cudaMemcpyAsync(recv, send, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
    } else {
      reduce_scatter(send, recv, n);
    }
  }
  void wait_queued(const char* what) override { wait(what); }
  void all_gather(const float* send, float* recv, size_t n) override {
    gather_chunks(send, recv, n);
    wait("all-gather");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    enqueue(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), "ncclBroadcast");
    wait("broadcast");
  }
  void barrier() override {
    float* one = static_cast<float*>(scratch(sizeof(float)));
    enqueue(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
    wait("barrier");
  }
  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // frees peers blocked on us; never blocks
    comm_ = nullptr;
    host_.abort(message, exit_code);
    std::_Exit(exit_code);  // not reached: host_.abort ends the process
  }

 private:
  void cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) abort(str_cat("NCCL communicator: ", what, ": ", cudaGetErrorString(e)), 1);
  }
  [[noreturn]] void fail(const char* what, ncclResult_t r) {
    abort(str_cat(what, " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(comm_),
                  "); a peer rank failed or the network broke; ending every rank"),
          1);
  }
  void enqueue(ncclResult_t r, const char* what) {
    if (r != ncclSuccess && r != ncclInProgress) fail(what, r);
  }
  // Spins for the first 200 µs of a wait (a bucket's collective on one node takes tens of µs: a 50 µs sleep would
  // double it), then sleeps 50 µs between polls so that a rank waiting for a slow peer gives its core away.
  void pause(std::chrono::steady_clock::time_point t0) const {
    if (elapsed(t0) < 200e-6) return;
    const timespec t{0, 50'000};
    nanosleep(&t, nullptr);
  }
  double elapsed(std::chrono::steady_clock::time_point t0) const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Non-blocking NCCL: a call may return ncclInProgress; the communicator's async error says when it settled.
  void settle(const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, state);
      if (elapsed(t0) > timeout_) timeout(what);
      pause(t0);
    }
  }
  [[noreturn]] void timeout(const char* what) {
    abort(str_cat(what, " did not complete within ", timeout_, " s (", kCollectiveTimeoutEnv,
                  "): another rank failed or stopped; ending every rank"),
          1);
  }
  // Until the stream has run everything enqueued; NCCL errors and the timeout end the job.
  void wait(const char* what) {
    settle(what);
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda(q, what);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(what, state);
      if (elapsed(t0) > timeout_) timeout(what);
      pause(t0);
    }
  }
  void* scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) {  // queued work may still read it: the stream first
        cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        cudaFree(scratch_);
      }
      cuda(cudaMalloc(&scratch_, bytes), "cudaMalloc");
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }
  void* pieces(size_t bytes) {
    if (bytes > pieces_bytes_) {
      if (pieces_ != nullptr) {  // queued work may still read it: the stream first
        cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        cudaFree(pieces_);
      }
      cuda(cudaMalloc(&pieces_, bytes), "cudaMalloc");
      pieces_bytes_ = bytes;
    }
    return pieces_;
  }

  // Enqueues: chunk r of every rank's `send` to rank r, then the rank-order sum into recv (no wait).
  template <typename T>
  void reduce_scatter(const T* send, T* recv, size_t n) {
    const int W = size(), me = rank();
    const size_t mine = chunk_size(n, W, me);
    T* in = static_cast<T*>(pieces(static_cast<size_t>(W) * mine * sizeof(T) + sizeof(T)));
    enqueue(ncclGroupStart(), "ncclGroupStart");
    for (int q = 0; q < W; ++q) {
      enqueue(ncclSend(send + chunk_begin(n, W, q), chunk_size(n, W, q), nccl_type<T>(), q, comm_, stream_),
              "ncclSend");
      enqueue(ncclRecv(in + static_cast<size_t>(q) * mine, mine, nccl_type<T>(), q, comm_, stream_), "ncclRecv");
    }
    enqueue(ncclGroupEnd(), "ncclGroupEnd");
    settle("reduce-scatter");
    if constexpr (sizeof(T) == 4) rank_order_sum_f32(in, W, mine, recv, stream_);
    else rank_order_sum_f64(in, W, mine, recv, stream_);
    cuda(cudaGetLastError(), "rank_order_sum");
  }

  // Enqueues: this rank's chunk to every rank, every rank's chunk into place (no wait).
  template <typename T>
  void gather_chunks(const T* send, T* recv, size_t n) {
    const int W = size(), me = rank();
    T* own = recv + chunk_begin(n, W, me);
    if (send != own)
      cuda(cudaMemcpyAsync(own, send, chunk_size(n, W, me) * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
           "cudaMemcpyAsync");
    enqueue(ncclGroupStart(), "ncclGroupStart");
    for (int q = 0; q < W; ++q) {
      if (q == me) continue;
      enqueue(ncclSend(send, chunk_size(n, W, me), nccl_type<T>(), q, comm_, stream_), "ncclSend");
      enqueue(ncclRecv(recv + chunk_begin(n, W, q), chunk_size(n, W, q), nccl_type<T>(), q, comm_, stream_),
              "ncclRecv");
    }
    enqueue(ncclGroupEnd(), "ncclGroupEnd");
    settle("all-gather");
  }

  // Enqueues the all-reduce (no wait).
  template <typename T>
  void all_reduce(T* data, size_t n) {
    if (size() == 1 || n == 0) return;
    T* mine = data + chunk_begin(n, size(), rank());
    // The reduced chunk goes to scratch first: the all-to-all still reads `data` while the sum is written.
    T* reduced = static_cast<T*>(scratch(chunk_size(n, size(), rank()) * sizeof(T) + sizeof(T)));
    reduce_scatter(data, reduced, n);
    cuda(cudaMemcpyAsync(mine, reduced, chunk_size(n, size(), rank()) * sizeof(T), cudaMemcpyDeviceToDevice,
                         stream_),
         "cudaMemcpyAsync");
    gather_chunks(static_cast<const T*>(mine), data, n);
  }

  Communicator& host_;
  double timeout_ = 600.0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* pieces_ = nullptr;
  size_t pieces_bytes_ = 0;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<NcclDeviceCommunicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace hlm
