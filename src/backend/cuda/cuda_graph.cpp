// CudaGraph: capture into a private allocator pool, instantiate, replay (contract in cuda_graph.h).
#include "backend/cuda/cuda_graph.h"

#include <exception>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "core/error.h"

namespace hlm {

std::unique_ptr<CudaGraph> CudaGraph::capture(CudaContext& ctx, const std::function<void()>& body, std::string* why) {
  ctx.make_current();
  CudaAllocator& allocator = ctx.allocator();
  std::unique_ptr<CudaGraph> g(new CudaGraph(ctx, allocator.create_pool()));
  const auto fail = [&](const std::string& reason) -> std::unique_ptr<CudaGraph> {
    if (why != nullptr) *why = reason;
    cudaGetLastError();  // capture errors are not sticky: clear the last one
    return nullptr;      // ~CudaGraph releases the pool
  };
  cudaError_t status = cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) return fail(std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(status));
  allocator.begin_pool(g->pool_);
  std::string error;
  try {
    body();
  } catch (const std::exception& e) {
    error = e.what();
  }
  allocator.end_pool();
  cudaGraph_t graph = nullptr;
  status = cudaStreamEndCapture(ctx.stream(), &graph);
  if (!error.empty()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return fail("the captured work failed: " + error);
  }
  if (status != cudaSuccess || graph == nullptr)
    return fail(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(status));
  g->graph_ = graph;
  status = cudaGraphInstantiate(&g->exec_, graph, 0);
  if (status != cudaSuccess) {
    g->exec_ = nullptr;
    return fail(std::string("cudaGraphInstantiate: ") + cudaGetErrorString(status));
  }
  HLM_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &g->nodes_));
  return g;
}

CudaGraph::~CudaGraph() {
  // Best effort, errors ignored (a destructor must not throw). A replay still queued keeps running on the stream:
  // cudaGraphExecDestroy may be called while it runs; the pool's blocks are handed out again only to work queued
  // later on the same stream.
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  ctx_->allocator().release_pool(pool_);
}

void CudaGraph::launch() const { HLM_CUDA_CHECK(cudaGraphLaunch(exec_, ctx_->stream())); }

size_t CudaGraph::pool_bytes() const { return ctx_->allocator().pool_bytes(pool_); }

}  // namespace hlm
