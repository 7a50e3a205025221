// CUDA graphs over the context's stream: capture the work a function queues once, replay it with one launch.
// For steps of fixed shape whose per-step inputs live at fixed device addresses (the inference engine's decode step,
// infer/cuda/cuda_engine.cpp): a decode step of a 4B model is ~800 small launches whose host cost exceeds their GPU
// time at batch 1; a replay costs one launch.
//
// Memory: every block allocated (or freed) while the body runs comes from / goes to a private pool of the context's
// allocator (cuda_allocator.h, "Private pools") that the graph owns: its scratch is never handed to anything else
// while the graph lives, and returns to the general free lists when the graph is destroyed. Tensors the body creates
// and the caller keeps (the step's outputs) are live blocks of that pool; free them before or with the graph.
// What a replay reads must be at the addresses the capture saw: the caller writes new inputs into buffers made
// before the capture (e.g. with cudaMemcpyAsync on the stream) and reads the outputs the body left.
//
// The body may not synchronize the stream or the device, copy device→host, or free memory with cudaFree (all are
// illegal during a capture); a body that does, or that throws, leaves no graph: capture() returns no graph and the
// reason (nullptr), the capture is ended and its error cleared, so the caller runs the work eagerly instead.
// Capture mode: cudaStreamCaptureModeRelaxed (the allocator's cudaMalloc of a new block is allowed inside it).
// Non-goals: graph updates (cudaGraphExecUpdate), several streams, conditional nodes.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hlm {

class CudaContext;

class CudaGraph {
 public:
  // Captures what `body` queues on ctx.stream(); nullptr (with *why set) when it cannot.
  static std::unique_ptr<CudaGraph> capture(CudaContext& ctx, const std::function<void()>& body, std::string* why);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Queues one replay on the context's stream (no wait).
  void launch() const;
  size_t nodes() const { return nodes_; }
  // Bytes of device memory the graph's private pool holds.
  size_t pool_bytes() const;

 private:
  CudaGraph(CudaContext& ctx, uint64_t pool) : ctx_(&ctx), pool_(pool) {}
  CudaContext* ctx_ = nullptr;
  uint64_t pool_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

}  // namespace hlm
