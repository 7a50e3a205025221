// DeviceCollectives over NCCL (device buffers) or the host communicator (pinned staging); contract in the header.
#include "train/cuda/device_collectives.h"

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
#include "dist/mpi_communicator.h"
#include "train/train_device.h"

#ifdef HLM_WITH_NCCL
#include "dist/cuda/nccl_communicator.h"
#endif

namespace hlm {

namespace {

#ifdef HLM_WITH_NCCL
// The NCCL communicator works on device buffers already: wait for the producer stream, then call it.
class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(CudaContext& ctx, Communicator& host) : ctx_(ctx), comm_(make_nccl_communicator(host)) {}
  const char* backend() const override { return "nccl"; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void all_reduce_sum(float* data, size_t n) override {
    ctx_.synchronize();
    comm_->all_reduce_sum(data, n);
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    ctx_.synchronize();
    comm_->reduce_scatter_sum(send, recv, n);
  }
  void all_gather(const float* send, float* recv, size_t n) override {
    ctx_.synchronize();
    comm_->all_gather(send, recv, n);
  }
  bool can_queue() const override { return true; }
  // Everything on the communicator's stream, behind the event: no host wait.
  void submit(Job job) override {
    const auto s = static_cast<cudaStream_t>(comm_->stream());
    HLM_CUDA_CHECK(cudaStreamWaitEvent(s, job.ready, 0));
    if (job.pack) job.pack(s);
    if (job.recv != nullptr) comm_->reduce_scatter_sum_queued(job.data, job.recv, job.n);
    else comm_->all_reduce_sum_queued(job.data, job.n);
    if (job.unpack) job.unpack(s);
    queued_ = true;
  }
  void finish() override {
    if (!queued_) return;
    queued_ = false;
    comm_->wait_queued("the gradient sums (overlapped)");
  }

 private:
  CudaContext& ctx_;
  std::unique_ptr<NcclDeviceCommunicator> comm_;
  bool queued_ = false;
};
#endif

// Device → pinned host → the host communicator → device. Two host buffers: the rank's input and the result.
class HostStagedCollectives final : public DeviceCollectives {
 public:
  HostStagedCollectives(CudaContext& ctx, Communicator& host) : ctx_(ctx), host_(host) {}
  ~HostStagedCollectives() override {
    if (helper_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake_.notify_all();
      helper_.join();
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    for (float* b : {in_, out_})
      if (b != nullptr) cudaFreeHost(b);
  }
  const char* backend() const override { return "host"; }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  void all_reduce_sum(float* data, size_t n) override {
    reserve(n);
    to_host(in_, data, n);
    host_.all_reduce_sum(in_, n);
    to_device(data, in_, n);
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    reserve(n);
    to_host(in_, send, n);
    host_.reduce_scatter_sum(in_, out_, n);
    to_device(recv, out_, chunk_size(n, size(), rank()));
  }
  void all_gather(const float* send, float* recv, size_t n) override {
    reserve(n);
    float* mine = out_ + chunk_begin(n, size(), rank());
    to_host(mine, send, chunk_size(n, size(), rank()));
    host_.all_gather(mine, out_, n);  // in place (communicator.h allows send = recv + chunk_begin)
    to_device(recv, out_, n);
  }
  bool can_queue() const override { return mpi_thread_serialized(); }
  void submit(Job job) override {
    if (!helper_.joinable()) {
      HLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      helper_ = std::thread([this] { helper_loop(); });
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
      ++pending_;
    }
    wake_.notify_all();
  }
  void finish() override {
    if (!helper_.joinable()) return;
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_ == 0; });
      std::swap(error, error_);
    }
    HLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the last job's copies back
    if (error) std::rethrow_exception(error);
  }

 private:
  // The helper thread: each job in order on stream_ (pack, copy to pinned memory, wait), the host communicator's
  // collective, the copy back and unpack queued on stream_. The next job's copy to in_ is queued behind the previous
  // copy back on the same stream, and the host writes the pinned buffers only after a stream wait: no buffer is
  // overwritten while read. After an error the remaining jobs are dropped (finish rethrows the first error).
  void helper_loop() {
    ctx_.make_current();
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (stop_ && jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      bool skip = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        skip = error_ != nullptr;
      }
      if (!skip) {
        try {
          run(job);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!error_) error_ = std::current_exception();
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      done_.notify_all();
    }
  }
  void run(const Job& job) {
    HLM_CUDA_CHECK(cudaStreamWaitEvent(stream_, job.ready, 0));
    if (job.pack) job.pack(stream_);
    if (job.n > capacity_) HLM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before reserve frees the buffers
    reserve(job.n);
    HLM_CUDA_CHECK(cudaMemcpyAsync(in_, job.data, job.n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    HLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (job.recv != nullptr) {
      host_.reduce_scatter_sum(in_, out_, job.n);
      HLM_CUDA_CHECK(cudaMemcpyAsync(job.recv, out_, chunk_size(job.n, size(), rank()) * sizeof(float),
                                     cudaMemcpyHostToDevice, stream_));
    } else {
      host_.all_reduce_sum(in_, job.n);
      HLM_CUDA_CHECK(cudaMemcpyAsync(job.data, in_, job.n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    }
    if (job.unpack) job.unpack(stream_);
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    for (float** b : {&in_, &out_}) {
      if (*b != nullptr) HLM_CUDA_CHECK(cudaFreeHost(*b));
      *b = nullptr;
      HLM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(b), n * sizeof(float)));
    }
    capacity_ = n;
  }
  // Waits for the stream (the producer of src, and the previous call's upload out of the same buffers).
  void to_host(float* dst, const float* src, size_t n) {
    HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize();
  }
  // Queued; the next to_host waits for it before the buffers are written again.
  void to_device(float* dst, const float* src, size_t n) {
    HLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, ctx_.stream()));
  }

  CudaContext& ctx_;
  Communicator& host_;
  float* in_ = nullptr;
  float* out_ = nullptr;
  size_t capacity_ = 0;
  // Queued jobs (submit/finish) and the helper thread that runs them on its own stream.
  cudaStream_t stream_ = nullptr;
  std::thread helper_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  size_t pending_ = 0;  // submitted and not yet run
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_device_collectives(CudaContext& ctx, Communicator& host) {
  const char* v = std::getenv(kGpuCollectivesEnv);
  std::string name = v != nullptr && *v != '\0' ? v : "";
#ifdef HLM_WITH_NCCL
  if (name.empty()) name = "nccl";
  if (name == "nccl") return std::make_unique<NcclCollectives>(ctx, host);
#else
  if (name.empty()) name = "host";
  HLM_CHECK_INPUT(name != "nccl", kGpuCollectivesEnv, "=nccl: this hybridlm was built without NCCL (use host)");
#endif
  HLM_CHECK_INPUT(name == "host", "environment variable ", kGpuCollectivesEnv, "='", name,
                  "' is not a way of moving gradients (nccl or host)");
  return std::make_unique<HostStagedCollectives>(ctx, host);
}

}  // namespace hlm
