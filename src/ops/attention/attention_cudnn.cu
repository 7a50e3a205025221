// The cuDNN attention engine (contract: attention_cudnn.h): cuDNN loaded with dlopen, the SDPA forward and backward
// expressed as cuDNN backend operation graphs (matmuls, pointwise ops, reductions, reshapes) that cuDNN's runtime
// fusion turns into its flash-attention kernels, one cached execution plan per shape. Host code only (a .cu file so
// that it builds with the CUDA toolkit's headers, cudnn_graph.h among them, exactly when the CUDA backend builds).
#include "ops/attention/attention_cudnn.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_error.h"
#include "core/error.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define HLM_HAVE_CUDNN_HEADERS 1
#else
#define HLM_HAVE_CUDNN_HEADERS 0
#endif

namespace hlm {

namespace {
std::atomic<int> g_engine_override{-1};
std::atomic<int64_t> g_cudnn_executions{0};
}  // namespace

void attention_set_engine(AttentionEngine engine) { g_engine_override = static_cast<int>(engine); }
void attention_clear_engine_override() { g_engine_override = -1; }
int64_t attention_cudnn_executions() { return g_cudnn_executions.load(); }

namespace {
// HLM_ATTENTION_ENGINE, read once: 0 unset / empty / auto, 1 native, 2 cudnn.
int engine_request() {
  static const int request = [] {
    const char* e = std::getenv("HLM_ATTENTION_ENGINE");
    if (e == nullptr || *e == '\0' || std::strcmp(e, "auto") == 0) return 0;
    if (std::strcmp(e, "native") == 0) return 1;
    if (std::strcmp(e, "cudnn") == 0) return 2;
    throw_input_error("HLM_ATTENTION_ENGINE=", e, ": expected auto, native or cudnn");
  }();
  return request;
}
}  // namespace

AttentionEngine attention_engine() {
  if (const int o = g_engine_override.load(); o >= 0) return static_cast<AttentionEngine>(o);
  switch (engine_request()) {
    case 1:
      return AttentionEngine::kNative;
    case 2:
      return AttentionEngine::kCudnn;
    default: {  // auto: cuDNN where it loads (asked once per process)
      static const bool loads = attention_cudnn_available();
      return loads ? AttentionEngine::kCudnn : AttentionEngine::kNative;
    }
  }
}

bool attention_engine_explicit() { return g_engine_override.load() >= 0 || engine_request() != 0; }

void attention_cudnn_note_refusal(std::once_flag& once, const char* what, const char* call, const std::string& why,
                                  const char* fallback) {
  if (!attention_engine_explicit()) return;
  std::call_once(once, [&] {
    std::fprintf(stderr, "%s: cuDNN engine refused %s (%s); %s\n", what, call, why.c_str(), fallback);
  });
}

#if !HLM_HAVE_CUDNN_HEADERS

bool attention_cudnn_available(std::string* why) {
  if (why != nullptr) *why = "built without cuDNN's headers (cudnn_graph.h)";
  return false;
}
bool attention_cudnn_forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                             const AttentionCudaParams&, cudaStream_t, std::string* why) {
  return attention_cudnn_available(why);
}
bool attention_cudnn_backward(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                              const float*, const AttentionCudaParams&, cudaStream_t, std::string* why) {
  return attention_cudnn_available(why);
}
bool attention_cudnn_forward_context(__nv_bfloat16*, float*, const __nv_bfloat16*, const __nv_bfloat16*,
                                     const __nv_bfloat16*, const AttentionCudnnContext&, cudaStream_t,
                                     std::string* why) {
  return attention_cudnn_available(why);
}
void attention_cudnn_gather_cache(__nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                  const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t) {
  throw_internal_error("attention_cudnn_gather_cache: built without cuDNN's headers");
}

#else

namespace {

// ---- The library, loaded once.
struct CudnnApi {
  void* lib = nullptr;
  std::string path, error;
  size_t version = 0;
  cudnnHandle_t handle = nullptr;
  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnGetLastErrorString) GetLastErrorString = nullptr;
  decltype(&cudnnBackendCreateDescriptor) CreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) SetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) GetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) Finalize = nullptr;
  decltype(&cudnnBackendExecute) Execute = nullptr;
};

template <typename F>
bool load_symbol(CudnnApi& a, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(a.lib, name));
  if (f == nullptr) a.error = std::string("symbol ") + name + " missing in " + a.path;
  return f != nullptr;
}

CudnnApi& api() {
  static CudnnApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("HLM_CUDNN_LIB");
    a.path = env != nullptr && *env != '\0' ? env : "libcudnn.so.9";
    a.lib = dlopen(a.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (a.lib == nullptr) {
      const char* e = dlerror();
      a.error = "dlopen(" + a.path + ") failed: " + (e != nullptr ? e : "?") +
                " (put cuDNN 9's lib folder on LD_LIBRARY_PATH or set HLM_CUDNN_LIB)";
      return;
    }
    const bool ok = load_symbol(a, a.GetVersion, "cudnnGetVersion") && load_symbol(a, a.Create, "cudnnCreate") &&
                    load_symbol(a, a.SetStream, "cudnnSetStream") &&
                    load_symbol(a, a.GetErrorString, "cudnnGetErrorString") &&
                    load_symbol(a, a.GetLastErrorString, "cudnnGetLastErrorString") &&
                    load_symbol(a, a.CreateDescriptor, "cudnnBackendCreateDescriptor") &&
                    load_symbol(a, a.DestroyDescriptor, "cudnnBackendDestroyDescriptor") &&
                    load_symbol(a, a.SetAttribute, "cudnnBackendSetAttribute") &&
                    load_symbol(a, a.GetAttribute, "cudnnBackendGetAttribute") &&
                    load_symbol(a, a.Finalize, "cudnnBackendFinalize") &&
                    load_symbol(a, a.Execute, "cudnnBackendExecute");
    if (!ok) return;
    a.version = a.GetVersion();
    if (a.version < 90000) {
      a.error = "cuDNN " + std::to_string(a.version) + " at " + a.path + " is older than 9.0";
      return;
    }
    const cudnnStatus_t st = a.Create(&a.handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      a.error = std::string("cudnnCreate: ") + a.GetErrorString(st);
      a.handle = nullptr;
    }
  });
  return a;
}

// A failed cuDNN call: its status and cuDNN's own last message.
struct CudnnError {
  std::string what;
};

void check(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  CudnnApi& a = api();
  char last[1024] = {0};
  a.GetLastErrorString(last, sizeof(last));
  throw CudnnError{std::string(what) + ": " + a.GetErrorString(st) + (last[0] != '\0' ? std::string(" (") + last + ")" : "")};
}

// An owned backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(api().CreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d_ != nullptr) api().DestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const T* values) {
    check(api().SetAttribute(d_, name, type, count, values), "cudnnBackendSetAttribute");
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Desc& set_type(cudnnBackendAttributeName_t name, cudnnDataType_t t) { return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t); }
  void finalize(const char* what) { check(api().Finalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using DescPtr = std::shared_ptr<Desc>;

// Builds one operation graph: tensors by uid, operations in order.
class GraphBuilder {
 public:
  // A tensor: dims and strides (4-D), type; virtual tensors get uids from 1000 up.
  DescPtr tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type,
                 bool is_virtual = false, bool by_value = false) {
    auto t = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const bool virt = is_virtual;
    t->set_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data())
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value) t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t->finalize("tensor descriptor");
    keep_.push_back(t);
    return t;
  }
  DescPtr virt(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type) {
    return tensor(next_virtual_++, std::move(dims), std::move(strides), type, true);
  }
  DescPtr scalar(int64_t uid, cudnnDataType_t type) { return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, type, false, true); }

  void matmul(const DescPtr& a, const DescPtr& b, const DescPtr& c) {
    auto m = std::make_shared<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m->set_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("matmul descriptor");
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *m)
        .finalize("matmul operation");
    keep_.push_back(m);
    ops_.push_back(op);
  }
  // y = mode(x [, b] [, t]); axis for GEN_INDEX; math precision `prec`.
  void pointwise(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b, const DescPtr& t, const DescPtr& y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    auto pw = std::make_shared<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode).set_type(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw->set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw->finalize("pointwise descriptor");
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x);
    if (b) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y).finalize("pointwise operation");
    keep_.push_back(pw);
    ops_.push_back(op);
  }
  void reduction(cudnnReduceTensorOp_t mode, const DescPtr& x, const DescPtr& y) {
    auto r = std::make_shared<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize("reduction descriptor");
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r)
        .finalize("reduction operation");
    keep_.push_back(r);
    ops_.push_back(op);
  }
  // The same operations into a new virtual tensor of `layout`, returned.
  struct Layout {
    std::vector<int64_t> dims, strides;
  };
  DescPtr pointwise_to(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b, const Layout& layout,
                       cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    DescPtr y = virt(layout.dims, layout.strides, type);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }
  DescPtr matmul_to(const DescPtr& a, const DescPtr& b, const Layout& layout, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    DescPtr c = virt(layout.dims, layout.strides, type);
    matmul(a, b, c);
    return c;
  }
  DescPtr reduction_to(cudnnReduceTensorOp_t mode, const DescPtr& x, const Layout& layout) {
    DescPtr y = virt(layout.dims, layout.strides, CUDNN_DATA_FLOAT);
    reduction(mode, x, y);
    return y;
  }

  void reshape(const DescPtr& x, const DescPtr& y) {
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x).set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y).finalize("reshape operation");
    ops_.push_back(op);
  }

  // The operation graph, heuristics (mode A, then the fallback list), and the first configuration that finalizes
  // into an execution plan. Throws CudnnError with every configuration's refusal when none does.
  std::shared_ptr<Desc> plan(int64_t* workspace_bytes) {
    CudnnApi& a = api();
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const DescPtr& o : ops_) ops.push_back(o->get());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a.handle)
        .finalize("operation graph");
    std::string refusals;
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      try {
        heur.finalize("engine heuristics");
      } catch (const CudnnError& e) {
        refusals += "\n  heuristics mode " + std::to_string(static_cast<int>(mode)) + ": " + e.what;
        continue;
      }
      int64_t count = 0;
      check(a.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
            "heuristics result count");
      std::vector<std::unique_ptr<Desc>> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      if (count > 0)
        check(a.GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                             raw.data()),
              "heuristics results");
      for (int64_t i = 0; i < got; ++i) {
        auto p = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        try {
          p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &a.handle)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[static_cast<size_t>(i)])
              .finalize("execution plan");
        } catch (const CudnnError& e) {
          refusals += "\n  mode " + std::to_string(static_cast<int>(mode)) + " config " + std::to_string(i) + ": " + e.what;
          continue;
        }
        int64_t ws = 0, n = 0;
        check(a.GetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
              "plan workspace size");
        *workspace_bytes = ws;
        return p;
      }
      if (got == 0) refusals += "\n  heuristics mode " + std::to_string(static_cast<int>(mode)) + ": no configuration";
    }
    throw CudnnError{"no engine configuration runs this graph:" + refusals};
  }

 private:
  std::vector<DescPtr> keep_, ops_;
  int64_t next_virtual_ = 1000;
};

// uids of the graphs' real tensors.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kOne, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kShift };

// B sequences of Sq queries over Skv keys each (Sq <= Skv; training: Sq == Skv), the queries the last Sq positions.
struct Shape {
  int64_t B, Sq, Skv, Hq, Hkv, D;
};

struct Plan {
  std::shared_ptr<Desc> plan;
  int64_t workspace_bytes = 0;
  bool packed_stats = false;      // stats in cuDNN's packed layout at stats_offset (else our lse is used directly)
  int64_t stats_offset = 0;
  void* workspace = nullptr;      // the plan's own: workspace_bytes (+ the fp32 scratch below)
  int64_t softmax_sum_offset = 0;  // backward: fp32 [B, Hq, S] rowsum(dO ∘ O) in `workspace`
  int64_t dq_accum_offset = 0;     // backward: fp32 [B, Hq, S, D] dQ accumulator in `workspace`
};

// Strides of a token-major [B·S, H, D] tensor seen as [B, H, S, D].
std::vector<int64_t> bhsd_strides(int64_t S, int64_t H, int64_t D) { return {S * H * D, D, H * D, 1}; }
// ... and of its transpose [B, H, D, S] (K^T, V^T).
std::vector<int64_t> bhds_strides(int64_t S, int64_t H, int64_t D) { return {S * H * D, D, 1, H * D}; }

// The scores' causal mask and -inf fill, as cuDNN's frontend builds it: keys col <= row + (Skv − Sq) kept (the
// diagonal aligned to the bottom right; top left when Sq == Skv).
DescPtr causal_mask(GraphBuilder& g, const DescPtr& scores, const GraphBuilder::Layout& l, const DescPtr& neg_inf,
                    const DescPtr& shift) {
  DescPtr row = g.virt(l.dims, l.strides, CUDNN_DATA_INT32), col = g.virt(l.dims, l.strides, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  if (shift) {
    DescPtr shifted = g.virt(l.dims, l.strides, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_ADD, row, shift, nullptr, shifted, CUDNN_DATA_INT32, 3);
    row = shifted;
  }
  DescPtr keep = g.virt(l.dims, l.strides, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  DescPtr masked = g.virt(l.dims, l.strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, neg_inf, keep, masked);
  return masked;
}

// The stats (lse) tensor: our layout [T, Hq] = strides [S·Hq, 1, Hq, 1], or (packed_stats) cuDNN's usual packed
// [B, Hq, S] in the plan's workspace, transposed to / from ours by stats_to_ours / stats_from_ours.
std::vector<int64_t> stats_strides(const Shape& s, bool packed_stats) {
  return packed_stats ? std::vector<int64_t>{s.Hq * s.Sq, s.Sq, 1, 1} : std::vector<int64_t>{s.Sq * s.Hq, 1, s.Hq, 1};
}

// The layouts both graphs use: scores [B, Hq, Sq, Skv] and their transpose, per-row values [B, Hq, S, 1], and the
// real tensors (q, out, d_out, dq token-major [T, Hq, D]; k, v, dk, dv [T, Hkv, D]; kᵀ, vᵀ as [B, Hkv, D, S]).
struct Layouts {
  using L = GraphBuilder::Layout;
  L scores, scores_t, rows, q, kv, kv_t, q_full;
  explicit Layouts(const Shape& s)
      : scores{{s.B, s.Hq, s.Sq, s.Skv}, {s.Hq * s.Sq * s.Skv, s.Sq * s.Skv, s.Skv, 1}},
        scores_t{{s.B, s.Hq, s.Skv, s.Sq}, {s.Hq * s.Sq * s.Skv, s.Sq * s.Skv, 1, s.Skv}},
        rows{{s.B, s.Hq, s.Sq, 1}, {s.Hq * s.Sq, s.Sq, 1, 1}},
        q{{s.B, s.Hq, s.Sq, s.D}, bhsd_strides(s.Sq, s.Hq, s.D)},
        kv{{s.B, s.Hkv, s.Skv, s.D}, bhsd_strides(s.Skv, s.Hkv, s.D)},
        kv_t{{s.B, s.Hkv, s.D, s.Skv}, bhds_strides(s.Skv, s.Hkv, s.D)},
        q_full{{s.B, s.Hq, s.Skv, s.D}, {s.Hq * s.Skv * s.D, s.Skv * s.D, s.D, 1}} {}
};

DescPtr bf16_tensor(GraphBuilder& g, int64_t uid, const GraphBuilder::Layout& l) {
  return g.tensor(uid, l.dims, l.strides, CUDNN_DATA_BFLOAT16);
}

std::shared_ptr<Desc> build_forward(const Shape& s, bool packed_stats, int64_t* ws) {
  GraphBuilder g;
  const Layouts l(s);
  DescPtr q = bf16_tensor(g, kQ, l.q), kt = bf16_tensor(g, kK, l.kv_t), v = bf16_tensor(g, kV, l.kv);
  DescPtr o = bf16_tensor(g, kO, l.q);
  DescPtr stats = g.tensor(kStats, l.rows.dims, stats_strides(s, packed_stats), CUDNN_DATA_FLOAT);
  DescPtr scale = g.scalar(kScale, CUDNN_DATA_FLOAT), neg_inf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
  // S = mask(scale · Q Kᵀ); stats = max + log Σ exp(S − max); O = (exp(S − max) / Σ) V
  DescPtr s2 = g.pointwise_to(CUDNN_POINTWISE_MUL, g.matmul_to(q, kt, l.scores), scale, l.scores);
  DescPtr shift = s.Skv != s.Sq ? g.scalar(kShift, CUDNN_DATA_INT32) : nullptr;
  DescPtr s3 = causal_mask(g, s2, l.scores, neg_inf, shift);
  DescPtr mx = g.reduction_to(CUDNN_REDUCE_TENSOR_MAX, s3, l.rows);
  DescPtr e = g.pointwise_to(CUDNN_POINTWISE_EXP, g.pointwise_to(CUDNN_POINTWISE_SUB, s3, mx, l.scores), nullptr,
                             l.scores);
  DescPtr z = g.reduction_to(CUDNN_REDUCE_TENSOR_ADD, e, l.rows);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, g.pointwise_to(CUDNN_POINTWISE_LOG, z, nullptr, l.rows), nullptr, stats);
  // P in the products' type, as cuDNN's frontend has it
  g.matmul(g.pointwise_to(CUDNN_POINTWISE_DIV, e, z, l.scores, CUDNN_DATA_BFLOAT16), v, o);
  return g.plan(ws);
}

std::shared_ptr<Desc> build_backward(const Shape& s, bool packed_stats, int64_t* ws) {
  GraphBuilder g;
  const Layouts l(s);
  DescPtr q = bf16_tensor(g, kQ, l.q), kt = bf16_tensor(g, kK, l.kv_t), vt = bf16_tensor(g, kV, l.kv_t);
  DescPtr o = bf16_tensor(g, kO, l.q), d_o = bf16_tensor(g, kDO, l.q);
  DescPtr dq = bf16_tensor(g, kDQ, l.q), dk = bf16_tensor(g, kDK, l.kv), dv = bf16_tensor(g, kDV, l.kv);
  DescPtr stats = g.tensor(kStats, l.rows.dims, stats_strides(s, packed_stats), CUDNN_DATA_FLOAT);
  DescPtr softmax_sum = g.tensor(kSoftmaxSum, l.rows.dims, l.rows.strides, CUDNN_DATA_FLOAT);
  DescPtr dq_accum = g.tensor(kDQAccum, l.q_full.dims, l.q_full.strides, CUDNN_DATA_FLOAT);
  DescPtr scale = g.scalar(kScale, CUDNN_DATA_FLOAT), neg_inf = g.scalar(kNegInf, CUDNN_DATA_FLOAT);
  DescPtr one = g.scalar(kOne, CUDNN_DATA_FLOAT);
  // softmax_sum = rowsum(dO ∘ O) (the frontend's strides for the product)
  const GraphBuilder::Layout dodo{l.q.dims, {s.Hq * s.Sq * s.D, s.Sq * s.D, s.Hq * s.D, 1}};
  DescPtr rs = g.reduction_to(CUDNN_REDUCE_TENSOR_ADD, g.pointwise_to(CUDNN_POINTWISE_MUL, d_o, o, dodo), l.rows);
  g.pointwise(CUDNN_POINTWISE_MUL, rs, one, nullptr, softmax_sum);
  // P = exp(mask(scale · Q Kᵀ − stats))
  DescPtr s2 = g.pointwise_to(CUDNN_POINTWISE_MUL, g.matmul_to(q, kt, l.scores), scale, l.scores);
  DescPtr s3 = g.pointwise_to(CUDNN_POINTWISE_SUB, s2, stats, l.scores);
  DescPtr p = g.pointwise_to(CUDNN_POINTWISE_EXP, causal_mask(g, s3, l.scores, neg_inf, nullptr), nullptr, l.scores);
  // dV = Pᵀ dO, dK = dSᵀ Q: with GQA a full-head product summed over each kv group
  const bool gqa = s.Hq != s.Hkv;
  const auto product_into = [&](const DescPtr& a, const DescPtr& b, const DescPtr& out) {
    if (gqa)
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, g.matmul_to(a, b, l.q_full, CUDNN_DATA_BFLOAT16), out);
    else
      g.matmul(a, b, out);
  };
  const auto transposed = [&](const DescPtr& x) {
    DescPtr t = g.virt(l.scores_t.dims, l.scores_t.strides, CUDNN_DATA_BFLOAT16);
    g.reshape(x, t);
    return t;
  };
  product_into(transposed(p), d_o, dv);
  // dS = scale · P ⊙ (dO Vᵀ − softmax_sum)
  DescPtr dp = g.pointwise_to(CUDNN_POINTWISE_SUB, g.matmul_to(d_o, vt, l.scores), softmax_sum, l.scores);
  DescPtr ds = g.pointwise_to(CUDNN_POINTWISE_MUL, g.pointwise_to(CUDNN_POINTWISE_MUL, dp, p, l.scores), scale,
                              l.scores);
  product_into(transposed(ds), q, dk);
  // dQ = dS K, accumulated in fp32, then rounded to bf16
  DescPtr kk = g.virt(l.kv.dims, l.kv.strides, CUDNN_DATA_BFLOAT16);
  g.reshape(kt, kk);
  g.matmul(ds, kk, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, nullptr, dq);
  return g.plan(ws);
}

// Stats between our [B, S, Hq] and cuDNN's packed [B, Hq, S] (fp32).
__global__ void stats_transpose_kernel(float* dst, const float* src, int64_t B, int64_t S, int64_t H, bool to_ours) {
  const int64_t n = B * S * H;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / (S * H), s = (i / H) % S, h = i % H;  // i indexes our layout
    const int64_t packed = (b * H + h) * S + s;
    if (to_ours)
      dst[i] = src[packed];
    else
      dst[packed] = src[i];
  }
}

void stats_transpose(float* dst, const float* src, const Shape& s, bool to_ours, cudaStream_t stream) {
  const int64_t n = s.B * s.Sq * s.Hq;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  stats_transpose_kernel<<<blocks, 256, 0, stream>>>(dst, src, s.B, s.Sq, s.Hq, to_ours);
}

// ---- Plan cache.
using PlanKey = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::shared_ptr<Plan>> plans;
  std::map<PlanKey, std::string> refused;
};

PlanCache& cache() {
  static PlanCache* c = new PlanCache();  // never destroyed: plans may outlive static destruction order
  return *c;
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

bool shape_of(const AttentionCudaParams& p, Shape* s, std::string* why) {
  const auto refuse = [&](const std::string& m) {
    if (why != nullptr) *why = m;
    return false;
  };
  if (p.window > 0) return refuse("sliding window");
  if (p.n_seqs <= 0 || p.max_seqlen <= 0 || p.n_seqs * p.max_seqlen != p.total_tokens)
    return refuse("sequences of different lengths");
  if (p.head_dim % 8 != 0 || p.head_dim > 256) return refuse("head dim " + std::to_string(p.head_dim));
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0) return refuse("kv heads do not divide q heads");
  *s = {p.n_seqs, p.max_seqlen, p.max_seqlen, p.q_heads, p.kv_heads, p.head_dim};
  return true;
}

// The cached plan for this call, built now if need be; nullptr (and why) when refused.
std::shared_ptr<Plan> plan_for(bool backward, const Shape& s, cudaStream_t stream, std::string* why) {
  CudnnApi& a = api();
  if (a.handle == nullptr) {
    if (why != nullptr) *why = a.error;
    return nullptr;
  }
  const PlanKey key{backward, s.B, s.Sq, s.Skv, s.Hq, s.Hkv, s.D};
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (auto it = c.plans.find(key); it != c.plans.end()) return it->second;
  if (auto it = c.refused.find(key); it != c.refused.end()) {
    if (why != nullptr) *why = it->second;
    return nullptr;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone) {
    if (why != nullptr) *why = "no plan for this shape yet and the stream is being captured";
    return nullptr;
  }
  auto plan = std::make_shared<Plan>();
  std::string refusals;
  for (const bool packed : {false, true}) {
    try {
      plan->plan = backward ? build_backward(s, packed, &plan->workspace_bytes)
                            : build_forward(s, packed, &plan->workspace_bytes);
      plan->packed_stats = packed;
      break;
    } catch (const CudnnError& e) {
      refusals += std::string(refusals.empty() ? "" : "; ") + (packed ? "packed stats: " : "strided stats: ") + e.what;
    }
  }
  if (!plan->plan) {
    c.refused[key] = refusals;
    if (why != nullptr) *why = refusals;
    return nullptr;
  }
  int64_t bytes = round_up(plan->workspace_bytes, 256);
  if (plan->packed_stats) {
    plan->stats_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * 4, 256);
  }
  if (backward) {
    plan->softmax_sum_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * 4, 256);
    plan->dq_accum_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * s.D * 4, 256);
  }
  if (bytes > 0 && cudaMalloc(&plan->workspace, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    c.refused[key] = "cudaMalloc of the plan's " + std::to_string(bytes) + "-byte workspace failed";
    if (why != nullptr) *why = c.refused[key];
    return nullptr;
  }
  c.plans[key] = plan;
  return plan;
}

bool execute(const Plan& plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, cudaStream_t stream,
             std::string* why) {
  CudnnApi& a = api();
  // One handle for the process: its stream is set per call, so calls from several threads take turns.
  static std::mutex handle_mutex;
  std::lock_guard<std::mutex> lock(handle_mutex);
  try {
    check(a.SetStream(a.handle, stream), "cudnnSetStream");
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    void* ws = plan.workspace;
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)
        .finalize("variant pack");
    check(a.Execute(a.handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
    ++g_cudnn_executions;
  } catch (const CudnnError& e) {
    if (why != nullptr) *why = e.what;
    return false;
  }
  return true;
}

}  // namespace

bool attention_cudnn_available(std::string* why) {
  CudnnApi& a = api();
  if (why != nullptr)
    *why = a.handle != nullptr ? "cuDNN " + std::to_string(a.version) + " (" + a.path + ")" : a.error;
  return a.handle != nullptr;
}

namespace {

bool forward_shape(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                   const __nv_bfloat16* v, const Shape& s, float scale_value, cudaStream_t stream, std::string* why) {
  const std::shared_ptr<Plan> plan = plan_for(false, s, stream, why);
  if (!plan) return false;
  // By-value scalars: the variant pack points at host values, read when the call is queued.
  float scale = scale_value, neg_inf = -std::numeric_limits<float>::infinity();
  int32_t shift = static_cast<int32_t>(s.Skv - s.Sq);
  float* stats = plan->packed_stats ? reinterpret_cast<float*>(static_cast<char*>(plan->workspace) + plan->stats_offset)
                                    : lse;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNegInf};
  std::vector<void*> ptrs{const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k), const_cast<__nv_bfloat16*>(v),
                          out, stats, &scale, &neg_inf};
  if (s.Skv != s.Sq) {
    uids.push_back(kShift);
    ptrs.push_back(&shift);
  }
  if (!execute(*plan, uids, ptrs, stream, why)) return false;
  if (plan->packed_stats) stats_transpose(lse, stats, s, true, stream);
  return true;
}

__global__ void gather_cache_kernel(__nv_bfloat16* k_out, __nv_bfloat16* v_out, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int32_t* tables, int64_t max_blocks,
                                    int64_t block_size, int64_t context, int64_t row_vecs) {
  const int64_t token = blockIdx.x;  // over B · context
  const int64_t n = token / context, t = token % context;
  const int64_t slot = static_cast<int64_t>(tables[n * max_blocks + t / block_size]) * block_size + t % block_size;
  const uint4* ks = reinterpret_cast<const uint4*>(k_cache) + slot * row_vecs;
  const uint4* vs = reinterpret_cast<const uint4*>(v_cache) + slot * row_vecs;
  uint4* kd = reinterpret_cast<uint4*>(k_out) + token * row_vecs;
  uint4* vd = reinterpret_cast<uint4*>(v_out) + token * row_vecs;
  for (int64_t i = threadIdx.x; i < row_vecs; i += blockDim.x) {
    kd[i] = ks[i];
    vd[i] = vs[i];
  }
}

}  // namespace

bool attention_cudnn_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const AttentionCudaParams& p, cudaStream_t stream,
                             std::string* why) {
  Shape s{};
  if (!shape_of(p, &s, why)) return false;
  return forward_shape(out, lse, q, k, v, s, p.scale, stream, why);
}

bool attention_cudnn_forward_context(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                     const __nv_bfloat16* v, const AttentionCudnnContext& c, cudaStream_t stream,
                                     std::string* why) {
  const auto refuse = [&](const std::string& m) {
    if (why != nullptr) *why = m;
    return false;
  };
  if (c.sequences <= 0 || c.queries <= 0 || c.queries > c.context) return refuse("queries outside 1..context");
  if (c.head_dim % 8 != 0 || c.head_dim > 256) return refuse("head dim " + std::to_string(c.head_dim));
  if (c.kv_heads <= 0 || c.q_heads % c.kv_heads != 0) return refuse("kv heads do not divide q heads");
  return forward_shape(out, lse, q, k, v, {c.sequences, c.queries, c.context, c.q_heads, c.kv_heads, c.head_dim},
                       c.scale, stream, why);
}

void attention_cudnn_gather_cache(__nv_bfloat16* k_out, __nv_bfloat16* v_out, const __nv_bfloat16* k_cache,
                                  const __nv_bfloat16* v_cache, const int32_t* tables, int64_t max_blocks,
                                  int64_t block_size, int64_t sequences, int64_t context, int64_t kv_heads,
                                  int64_t head_dim, cudaStream_t stream) {
  const int64_t row_bytes = kv_heads * head_dim * 2;
  HLM_CHECK(row_bytes % 16 == 0, "attention_cudnn_gather_cache: a token row of ", row_bytes, " bytes");
  if (sequences <= 0 || context <= 0) return;
  HLM_CHECK(sequences * context <= 0x7FFFFFFF, "attention_cudnn_gather_cache: too many tokens");
  gather_cache_kernel<<<static_cast<unsigned>(sequences * context), 128, 0, stream>>>(
      k_out, v_out, k_cache, v_cache, tables, max_blocks, block_size, context, row_bytes / 16);
  HLM_CUDA_CHECK(cudaGetLastError());
}
bool attention_cudnn_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                              const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                              const __nv_bfloat16* out, const float* lse, const AttentionCudaParams& p,
                              cudaStream_t stream, std::string* why) {
  Shape s{};
  if (!shape_of(p, &s, why)) return false;
  const std::shared_ptr<Plan> plan = plan_for(true, s, stream, why);
  if (!plan) return false;
  float scale = p.scale, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  char* ws = static_cast<char*>(plan->workspace);
  float* stats = const_cast<float*>(lse);
  if (plan->packed_stats) {
    stats = reinterpret_cast<float*>(ws + plan->stats_offset);
    stats_transpose(stats, lse, s, false, stream);
  }
  return execute(*plan,
                 {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kScale, kNegInf, kOne},
                 {const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k), const_cast<__nv_bfloat16*>(v),
                  const_cast<__nv_bfloat16*>(out), const_cast<__nv_bfloat16*>(d_out), stats, dq, dk, dv,
                  ws + plan->softmax_sum_offset, ws + plan->dq_accum_offset, &scale, &neg_inf, &one},
                 stream, why);
}

#endif  // HLM_HAVE_CUDNN_HEADERS

}  // namespace hlm
