// DeviceCollectives over NCCL (device buffers) or the host communicator (pinned staging); contract in the header.
#include "train/cuda/device_collectives.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"
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

 private:
  CudaContext& ctx_;
  std::unique_ptr<Communicator> comm_;
};
#endif

// Device → pinned host → the host communicator → device. Two host buffers: the rank's input and the result.
class HostStagedCollectives final : public DeviceCollectives {
 public:
  HostStagedCollectives(CudaContext& ctx, Communicator& host) : ctx_(ctx), host_(host) {}
  ~HostStagedCollectives() override {
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

 private:
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
