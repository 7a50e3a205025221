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
#include <functional>
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
std::atomic<int> g_plan_override{-1};   // AttentionCudnnPlanChoice, or -1: HLM_CUDNN_PLAN
std::atomic<int> g_plan_candidate{-1};  // >= 0: that candidate, untimed (tests)
}  // namespace

AttentionCudnnPlanChoice attention_cudnn_plan_choice() {
  if (const int o = g_plan_override.load(); o >= 0) return static_cast<AttentionCudnnPlanChoice>(o);
  static const AttentionCudnnPlanChoice request = [] {
    const char* e = std::getenv("HLM_CUDNN_PLAN");
    if (e == nullptr || *e == '\0' || std::strcmp(e, "first") == 0) return AttentionCudnnPlanChoice::kFirst;
    if (std::strcmp(e, "timed") == 0) return AttentionCudnnPlanChoice::kTimed;
    throw_input_error("HLM_CUDNN_PLAN=", e, ": expected first or timed");
  }();
  return request;
}
void attention_cudnn_set_plan_choice(AttentionCudnnPlanChoice choice, int candidate) {
  g_plan_override = static_cast<int>(choice);
  g_plan_candidate = candidate;
}
void attention_cudnn_clear_plan_choice() {
  g_plan_override = -1;
  g_plan_candidate = -1;
}

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
void attention_cudnn_reset_plans() {}
bool attention_cudnn_plan_info(bool, const AttentionCudaParams&, AttentionCudnnPlanInfo*) { return false; }

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

// One engine configuration finalized into an execution plan.
struct PlanCandidate {
  std::shared_ptr<Desc> plan;
  int64_t workspace_bytes = 0;
  std::string name;         // "engine <global index>" and its knob choices: what tells two configurations apart
  std::string source = "";  // the heuristics mode that listed it first (A, B, fallback)
};

// "engine 8 knobs 2=1,17=0": a configuration's engine and knob choices (the key that deduplicates the heuristics'
// lists); "engine ?" when cuDNN does not say.
std::string config_name(const Desc& cfg) {
  CudnnApi& a = api();
  std::string name = "engine ?";
  try {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t n = 0, index = -1;
    check(a.GetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e), "engine");
    check(a.GetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index), "engine index");
    name = "engine " + std::to_string(index);
    constexpr int kMaxKnobs = 64;
    std::vector<std::unique_ptr<Desc>> knobs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int i = 0; i < kMaxKnobs; ++i) {
      knobs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
      raw.push_back(knobs.back()->get());
    }
    int64_t got = 0;
    check(a.GetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, &got,
                         raw.data()),
          "knob choices");
    std::vector<std::pair<int64_t, int64_t>> choices;
    for (int64_t i = 0; i < got && i < kMaxKnobs; ++i) {
      cudnnBackendKnobType_t type{};
      int64_t value = 0;
      check(a.GetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n,
                           &type),
            "knob type");
      check(a.GetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n,
                           &value),
            "knob value");
      choices.emplace_back(static_cast<int64_t>(type), value);
    }
    std::sort(choices.begin(), choices.end());
    for (size_t i = 0; i < choices.size(); ++i)
      name += (i == 0 ? " knobs " : ",") + std::to_string(choices[i].first) + "=" + std::to_string(choices[i].second);
  } catch (const CudnnError&) {
    // the name stays what was read ("engine ?" when not even the engine: the caller then never merges it)
  }
  return name;
}

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

  // The operation graph and the engine configurations that finalize into execution plans, in order: heuristics
  // mode A's list, then (all_modes) mode B's, then the fallback list; a configuration met before (the same engine and
  // knob choices) is skipped. At most `max_plans` are kept; with all_modes false the first one ends the search (mode
  // A's first that finalizes, else the fallback list's: the plan the engine used before plans were timed). Throws
  // CudnnError with every configuration's refusal when none finalizes.
  std::vector<PlanCandidate> plans(bool all_modes, int max_plans) {
    CudnnApi& a = api();
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const DescPtr& o : ops_) ops.push_back(o->get());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a.handle)
        .finalize("operation graph");
    std::string refusals;
    std::vector<PlanCandidate> found;
    std::vector<cudnnBackendHeurMode_t> modes{CUDNN_HEUR_MODE_A};
    if (all_modes) modes.push_back(CUDNN_HEUR_MODE_B);
    modes.push_back(CUDNN_HEUR_MODE_FALLBACK);
    const auto mode_name = [](cudnnBackendHeurMode_t m) {
      return m == CUDNN_HEUR_MODE_A ? "A" : m == CUDNN_HEUR_MODE_B ? "B" : "fallback";
    };
    for (const cudnnBackendHeurMode_t mode : modes) {
      if (static_cast<int>(found.size()) >= max_plans || (!all_modes && !found.empty())) break;
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      try {
        heur.finalize("engine heuristics");
      } catch (const CudnnError& e) {
        refusals += std::string("\n  heuristics mode ") + mode_name(mode) + ": " + e.what;
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
        if (static_cast<int>(found.size()) >= max_plans || (!all_modes && !found.empty())) break;
        std::string name = config_name(*cfgs[static_cast<size_t>(i)]);
        if (name.rfind("engine ?", 0) == 0) name += std::string(" #") + mode_name(mode) + std::to_string(i);  // unnamed: never merged
        if (std::any_of(found.begin(), found.end(), [&](const PlanCandidate& c) { return c.name == name; })) continue;
        auto p = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        try {
          p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &a.handle)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[static_cast<size_t>(i)])
              .finalize("execution plan");
        } catch (const CudnnError& e) {
          refusals += std::string("\n  mode ") + mode_name(mode) + " config " + std::to_string(i) + " (" + name +
                      "): " + e.what;
          continue;
        }
        int64_t ws = 0, n = 0;
        check(a.GetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
              "plan workspace size");
        found.push_back({p, ws, name, mode_name(mode)});
      }
      if (got == 0) refusals += std::string("\n  heuristics mode ") + mode_name(mode) + ": no configuration";
    }
    if (found.empty()) throw CudnnError{"no engine configuration runs this graph:" + refusals};
    return found;
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
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (workspace != nullptr) cudaFree(workspace);  // only plans dropped by attention_cudnn_reset_plans or not chosen
  }
  std::shared_ptr<Desc> plan;
  int64_t workspace_bytes = 0;
  std::string engine;             // the configuration's name (config_name)
  int candidates = 1, chosen = 0;  // how many configurations finalized (and were considered); which one this is
  bool timed = false;
  std::vector<double> ms;          // timed: each candidate's median ms (negative: it failed to run)
  bool packed_stats = false;      // stats in cuDNN's packed layout at stats_offset (else our lse is used directly)
  int64_t stats_offset = 0;
  void* workspace = nullptr;      // the plan's own: workspace_bytes (+ the fp32 scratch below), workspace_total in all
  int64_t workspace_total = 0;
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

std::vector<PlanCandidate> build_forward(const Shape& s, bool packed_stats, bool all_modes, int max_plans) {
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
  return g.plans(all_modes, max_plans);
}

std::vector<PlanCandidate> build_backward(const Shape& s, bool packed_stats, bool all_modes, int max_plans) {
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
  return g.plans(all_modes, max_plans);
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
// By stream too: a plan's workspace holds a call's scratch (and the forward's statistics) until the call's kernels
// end, so two streams running the same shape at once (the distillation teacher's forward on the context's side
// stream beside the student's recomputing backward, backend/cuda/cuda_context.h) each need their own.
using PlanKey = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uintptr_t>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::shared_ptr<Plan>> plans;
  std::map<PlanKey, std::string> refused;
  // The timed list of each shape built with all modes (and its stats layout): a forced candidate (tests) reuses it.
  std::map<PlanKey, std::pair<std::vector<PlanCandidate>, bool>> lists;
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

// Plan choice by timing (HLM_CUDNN_PLAN=timed): at most this many configurations per graph, each run this many times
// untimed then timed (median) on the call's shape. The fastest replaces the heuristics' first only when it is at
// least 2 % faster (kSwitchMargin): closer than that the order can flip between processes on the timing's noise, and
// the heuristics' first is the plan the engine ran before plans were timed.
constexpr int kMaxPlanCandidates = 8;
constexpr int kTrialWarmup = 2, kTrialRuns = 5;
constexpr double kSwitchMargin = 0.98;

// One untimed execution of a candidate plan on the call's inputs, its outputs in `scratch` (the call's output sizes).
using Trial = std::function<bool(const Plan&, char* scratch, std::string* why)>;

bool plan_verbose() {
  static const bool verbose = [] {
    const char* e = std::getenv("HLM_CUDNN_PLAN_VERBOSE");
    return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
  }();
  return verbose;
}

// Lays out a plan's own workspace (cuDNN's, packed stats, backward's softmax sums and dQ accumulator) and allocates
// it; false when cudaMalloc fails.
bool allocate_workspace(Plan& plan, const Shape& s, bool backward) {
  int64_t bytes = round_up(plan.workspace_bytes, 256);
  if (plan.packed_stats) {
    plan.stats_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * 4, 256);
  }
  if (backward) {
    plan.softmax_sum_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * 4, 256);
    plan.dq_accum_offset = bytes;
    bytes += round_up(s.B * s.Hq * s.Sq * s.D * 4, 256);
  }
  if (bytes > 0 && cudaMalloc(&plan.workspace, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    plan.workspace = nullptr;
    return false;
  }
  plan.workspace_total = bytes;
  return true;
}

// Median ms of `trial` on `plan` (after kTrialWarmup runs), or −1 when it fails to run; the stream is synchronized on
// return.
double time_plan(const Trial& trial, const Plan& plan, char* scratch, int64_t scratch_bytes, cudaStream_t stream,
                 std::string* err) {
  // Zeros in what the plan reads but the trial does not fill (packed stats, the dQ accumulator): finite values.
  if (plan.workspace != nullptr) cudaMemsetAsync(plan.workspace, 0, static_cast<size_t>(plan.workspace_total), stream);
  cudaMemsetAsync(scratch, 0, static_cast<size_t>(scratch_bytes), stream);
  for (int i = 0; i < kTrialWarmup; ++i)
    if (!trial(plan, scratch, err)) {
      cudaStreamSynchronize(stream);  // nothing queued still uses the plan's workspace when it is dropped
      cudaGetLastError();
      return -1.0;
    }
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    cudaGetLastError();
    if (start != nullptr) cudaEventDestroy(start);
    return -1.0;
  }
  std::vector<double> ms;
  for (int i = 0; i < kTrialRuns; ++i) {
    cudaEventRecord(start, stream);
    const bool ok = trial(plan, scratch, err);
    cudaEventRecord(stop, stream);
    float t = 0.0f;
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&t, start, stop) != cudaSuccess) {
      cudaGetLastError();
      ms.clear();
      break;
    }
    ms.push_back(t);
  }
  cudaStreamSynchronize(stream);
  cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (ms.empty()) return -1.0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The index of the smallest non-negative time, −1 when none.
int best_of(const std::vector<double>& ms) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(ms.size()); ++i)
    if (ms[static_cast<size_t>(i)] >= 0 && (best < 0 || ms[static_cast<size_t>(i)] < ms[static_cast<size_t>(best)]))
      best = i;
  return best;
}

// Where a trial writes one output in its scratch: byte offset, element count, bf16 (else fp32).
struct TrialOutput {
  int64_t offset = 0, count = 0;
  bool bf16 = true;
};

// The screen of the timed choice: a candidate is kept only when each of its trial outputs is within kScreenTolerance ×
// (the largest |value| of that output) of the heuristics' first plan's (the plan the tests check), and NaN where it
// is NaN. Two correct plans differ by summation order and bf16 roundings (far below 5 % of the largest value); a wrong
// one is off by the values' own size: on the H200 (session 15) cuDNN's engine 7 finalized and ran our backward graph
// and its dq, dk, dv erred by 10-30 where the tests allow ~0.01 (AttentionCudnn.EveryPlanPassesTheReferences).
constexpr double kScreenTolerance = 0.05;

float output_value(const std::vector<char>& bytes, const TrialOutput& o, int64_t i) {
  float v = 0.0f;
  if (o.bf16) {
    uint16_t h = 0;
    std::memcpy(&h, bytes.data() + o.offset + 2 * i, 2);
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    std::memcpy(&v, &u, 4);
  } else {
    std::memcpy(&v, bytes.data() + o.offset + 4 * i, 4);
  }
  return v;
}

// Whether `got` agrees with `ref` on every output (the screen above); `why` says where not.
bool outputs_agree(const std::vector<char>& ref, const std::vector<char>& got, const std::vector<TrialOutput>& outputs,
                   std::string* why) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TrialOutput& o = outputs[k];
    double largest = 0.0, worst = 0.0;
    for (int64_t i = 0; i < o.count; ++i) {
      const float r = output_value(ref, o, i), g = output_value(got, o, i);
      if (std::isnan(r) || std::isnan(g)) {
        if (std::isnan(r) != std::isnan(g)) {
          *why = "output " + std::to_string(k) + ": NaN where the first plan's is not (or the reverse)";
          return false;
        }
        continue;
      }
      if (r == g) {
        if (std::isfinite(r)) largest = std::max(largest, std::fabs(double(r)));
        continue;
      }
      if (!std::isfinite(r) || !std::isfinite(g)) {
        *why = "output " + std::to_string(k) + ": an infinity where the first plan's value differs";
        return false;
      }
      largest = std::max(largest, std::fabs(double(r)));
      worst = std::max(worst, std::fabs(double(g) - double(r)));
    }
    if (!(worst <= kScreenTolerance * largest)) {
      *why = "output " + std::to_string(k) + ": max |difference| " + std::to_string(worst) +
             " against the first plan's, largest |value| " + std::to_string(largest);
      return false;
    }
  }
  return true;
}

bool download(std::vector<char>* host, const void* device, int64_t bytes) {
  host->resize(static_cast<size_t>(bytes));
  if (cudaMemcpy(host->data(), device, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

std::string shape_name(bool backward, const Shape& s) {
  std::ostringstream o;
  o << (backward ? "bwd" : "fwd") << " B" << s.B << " Sq" << s.Sq << " Skv" << s.Skv << " Hq" << s.Hq << " Hkv" << s.Hkv
    << " D" << s.D;
  return o.str();
}

// The cached plan for this call, built now if need be; nullptr (and why) when refused. `trial` (the training calls;
// none for the inference context call, whose shapes vary per chunk) lets the timed choice run candidates; `outputs`
// says where a trial writes what it computes in its scratch (the screen compares them with the first plan's).
std::shared_ptr<Plan> plan_for(bool backward, const Shape& s, cudaStream_t stream, std::string* why,
                               int64_t scratch_bytes = 0, const Trial& trial = {},
                               const std::vector<TrialOutput>& outputs = {}) {
  CudnnApi& a = api();
  if (a.handle == nullptr) {
    if (why != nullptr) *why = a.error;
    return nullptr;
  }
  const PlanKey key{backward, s.B, s.Sq, s.Skv, s.Hq, s.Hkv, s.D, reinterpret_cast<uintptr_t>(stream)};
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const int forced = trial ? g_plan_candidate.load() : -1;
  if (auto it = c.plans.find(key); it != c.plans.end() && (forced < 0 || it->second->chosen == forced))
    return it->second;
  if (auto it = c.refused.find(key); it != c.refused.end()) {
    if (why != nullptr) *why = it->second;
    return nullptr;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone) {
    if (why != nullptr) *why = "no plan for this shape yet and the stream is being captured";
    return nullptr;
  }
  const bool all = trial && (forced >= 0 || attention_cudnn_plan_choice() == AttentionCudnnPlanChoice::kTimed);
  std::vector<PlanCandidate> cands;
  bool packed = false;
  std::string refusals;
  if (auto it = c.lists.find(key); all && it != c.lists.end()) std::tie(cands, packed) = it->second;
  for (const bool pk : {false, true}) {
    if (!cands.empty()) break;
    try {
      const int most = all ? kMaxPlanCandidates : 1;
      cands = backward ? build_backward(s, pk, all, most) : build_forward(s, pk, all, most);
      packed = pk;
      break;
    } catch (const CudnnError& e) {
      refusals += std::string(refusals.empty() ? "" : "; ") + (pk ? "packed stats: " : "strided stats: ") + e.what;
    }
  }
  if (cands.empty()) {
    c.refused[key] = refusals;
    if (why != nullptr) *why = refusals;
    return nullptr;
  }
  if (all) c.lists[key] = {cands, packed};
  const int n = static_cast<int>(cands.size());
  // Candidate i as a Plan with its own workspace; nullptr when the workspace cannot be allocated.
  const auto make_plan = [&](int i) -> std::shared_ptr<Plan> {
    auto p = std::make_shared<Plan>();
    p->plan = cands[static_cast<size_t>(i)].plan;
    p->workspace_bytes = cands[static_cast<size_t>(i)].workspace_bytes;
    p->packed_stats = packed;
    p->engine = cands[static_cast<size_t>(i)].name;
    p->candidates = n;
    p->chosen = i;
    return allocate_workspace(*p, s, backward) ? p : nullptr;
  };
  std::vector<std::shared_ptr<Plan>> made(static_cast<size_t>(n));
  std::vector<double> ms;
  int pick = 0;
  std::string note;
  if (trial && forced >= 0) {
    if (forced >= n) {  // not cached: a test's request, not a property of the shape
      if (why != nullptr) *why = "candidate " + std::to_string(forced) + " asked for, " + std::to_string(n) + " finalize";
      return nullptr;
    }
    pick = forced;
  } else if (all && n > 1) {
    void* scratch = nullptr;
    if (cudaMalloc(&scratch, static_cast<size_t>(std::max<int64_t>(scratch_bytes, 256))) != cudaSuccess) {
      cudaGetLastError();
      note = "timing skipped: no memory for the trial outputs";
    } else {
      ms.assign(static_cast<size_t>(n), -1.0);
      std::vector<char> reference, current;
      for (int i = 0; i < n; ++i) {
        made[static_cast<size_t>(i)] = make_plan(i);
        if (!made[static_cast<size_t>(i)]) continue;
        std::string err;
        ms[static_cast<size_t>(i)] =
            time_plan(trial, *made[static_cast<size_t>(i)], static_cast<char*>(scratch), scratch_bytes, stream, &err);
        if (ms[static_cast<size_t>(i)] < 0 && plan_verbose())
          std::fprintf(stderr, "attention_cudnn: %s: candidate %d (%s) did not run: %s\n",
                       shape_name(backward, s).c_str(), i, cands[static_cast<size_t>(i)].name.c_str(), err.c_str());
        // The screen: the first plan's outputs are the reference; a candidate that disagrees (or any, when the first
        // did not run or its outputs could not be read) is marked −2 and never chosen.
        if (ms[static_cast<size_t>(i)] >= 0) {
          if (i == 0) {
            if (!download(&reference, scratch, scratch_bytes)) reference.clear();
          } else if (reference.empty() || !download(&current, scratch, scratch_bytes) ||
                     !outputs_agree(reference, current, outputs, &err)) {
            if (plan_verbose())
              std::fprintf(stderr, "attention_cudnn: %s: candidate %d (%s) screened out: %s\n",
                           shape_name(backward, s).c_str(), i, cands[static_cast<size_t>(i)].name.c_str(),
                           reference.empty() ? "no reference outputs" : err.c_str());
            ms[static_cast<size_t>(i)] = -2.0;
          }
        }
        // Only the first and the fastest so far keep their workspaces (a backward's holds a [B·S, Hq, D] fp32 dQ
        // accumulator); time_plan synchronized the trials, so the others are idle.
        const int b = best_of(ms);
        for (int j = 1; j <= i; ++j)
          if (j != b) made[static_cast<size_t>(j)].reset();
      }
      cudaStreamSynchronize(stream);  // the trials are done before their buffers go
      cudaGetLastError();
      cudaFree(scratch);
      const int best = best_of(ms);
      if (best >= 0 && (ms[0] < 0 || ms[static_cast<size_t>(best)] < kSwitchMargin * ms[0])) pick = best;
    }
  }
  std::shared_ptr<Plan> plan = made[static_cast<size_t>(pick)] ? made[static_cast<size_t>(pick)] : make_plan(pick);
  made.clear();  // the other candidates' workspaces are freed (idle: the trials were synchronized)
  if (!plan) {
    c.refused[key] = "cudaMalloc of the plan's workspace failed";
    if (why != nullptr) *why = c.refused[key];
    return nullptr;
  }
  plan->timed = !ms.empty();
  plan->ms = ms;
  if (c.plans.count(key) != 0) cudaDeviceSynchronize();  // a forced candidate replaces a plan: its queued calls end first
  if (plan_verbose()) {
    std::fprintf(stderr, "attention_cudnn: %s: %d configuration(s) finalize%s%s\n", shape_name(backward, s).c_str(), n,
                 note.empty() ? "" : "; ", note.c_str());
    for (int i = 0; i < n; ++i)
      std::fprintf(stderr, "attention_cudnn:   %s%d %s (mode %s) %s\n", i == pick ? "* " : "  ", i,
                   cands[static_cast<size_t>(i)].name.c_str(), cands[static_cast<size_t>(i)].source.c_str(),
                   ms.empty() ? "" : ms[static_cast<size_t>(i)] == -2.0 ? "screened out" : ms[static_cast<size_t>(i)] < 0 ? "failed" : (std::to_string(ms[static_cast<size_t>(i)]) + " ms").c_str());
  }
  c.plans[key] = plan;
  return plan;
}

// count: whether attention_cudnn_executions counts it (not the plan trials).
bool execute(const Plan& plan, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, cudaStream_t stream,
             std::string* why, bool count = true) {
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
    if (count) ++g_cudnn_executions;
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

// train: a training-contract call (Sq == Skv), whose plan may be chosen by timing (plan_for).
bool forward_shape(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                   const __nv_bfloat16* v, const Shape& s, float scale_value, cudaStream_t stream, std::string* why,
                   bool train) {
  // By-value scalars: the variant pack points at host values, read when the call is queued.
  float scale = scale_value, neg_inf = -std::numeric_limits<float>::infinity();
  int32_t shift = static_cast<int32_t>(s.Skv - s.Sq);
  const auto run = [&](const Plan& plan, __nv_bfloat16* o, float* our_lse, std::string* err, bool count) {
    float* stats = plan.packed_stats ? reinterpret_cast<float*>(static_cast<char*>(plan.workspace) + plan.stats_offset)
                                     : our_lse;
    std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNegInf};
    std::vector<void*> ptrs{const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k),
                            const_cast<__nv_bfloat16*>(v), o, stats, &scale, &neg_inf};
    if (s.Skv != s.Sq) {
      uids.push_back(kShift);
      ptrs.push_back(&shift);
    }
    return execute(plan, uids, ptrs, stream, err, count);
  };
  // Trials write out and lse into scratch: [B·Sq, Hq, D] bf16, then [B·Sq, Hq] fp32.
  const int64_t out_bytes = round_up(s.B * s.Sq * s.Hq * s.D * 2, 256);
  const Trial trial = [&](const Plan& plan, char* scratch, std::string* err) {
    return run(plan, reinterpret_cast<__nv_bfloat16*>(scratch), reinterpret_cast<float*>(scratch + out_bytes), err,
               false);
  };
  const std::shared_ptr<Plan> plan =
      train ? plan_for(false, s, stream, why, out_bytes + s.B * s.Sq * s.Hq * 4, trial,
                       {{0, s.B * s.Sq * s.Hq * s.D, true}, {out_bytes, s.B * s.Sq * s.Hq, false}})
            : plan_for(false, s, stream, why);
  if (!plan) return false;
  if (!run(*plan, out, lse, why, true)) return false;
  if (plan->packed_stats)
    stats_transpose(lse, reinterpret_cast<float*>(static_cast<char*>(plan->workspace) + plan->stats_offset), s, true,
                    stream);
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
  return forward_shape(out, lse, q, k, v, s, p.scale, stream, why, true);
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
                       c.scale, stream, why, false);
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
  float scale = p.scale, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  const auto run = [&](const Plan& plan, __nv_bfloat16* dq_out, __nv_bfloat16* dk_out, __nv_bfloat16* dv_out,
                       std::string* err, bool count) {
    char* ws = static_cast<char*>(plan.workspace);
    float* stats = plan.packed_stats ? reinterpret_cast<float*>(ws + plan.stats_offset) : const_cast<float*>(lse);
    return execute(plan, {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kScale, kNegInf, kOne},
                   {const_cast<__nv_bfloat16*>(q), const_cast<__nv_bfloat16*>(k), const_cast<__nv_bfloat16*>(v),
                    const_cast<__nv_bfloat16*>(out), const_cast<__nv_bfloat16*>(d_out), stats, dq_out, dk_out, dv_out,
                    ws + plan.softmax_sum_offset, ws + plan.dq_accum_offset, &scale, &neg_inf, &one},
                   stream, err, count);
  };
  // Trials write dq [B·S, Hq, D], dk and dv [B·S, Hkv, D] (bf16) into scratch.
  const int64_t dq_bytes = round_up(s.B * s.Sq * s.Hq * s.D * 2, 256), dkv_bytes = round_up(s.B * s.Skv * s.Hkv * s.D * 2, 256);
  const Trial trial = [&](const Plan& plan, char* scratch, std::string* err) {
    return run(plan, reinterpret_cast<__nv_bfloat16*>(scratch), reinterpret_cast<__nv_bfloat16*>(scratch + dq_bytes),
               reinterpret_cast<__nv_bfloat16*>(scratch + dq_bytes + dkv_bytes), err, false);
  };
  const std::shared_ptr<Plan> plan =
      plan_for(true, s, stream, why, dq_bytes + 2 * dkv_bytes, trial,
               {{0, s.B * s.Sq * s.Hq * s.D, true}, {dq_bytes, s.B * s.Skv * s.Hkv * s.D, true},
                {dq_bytes + dkv_bytes, s.B * s.Skv * s.Hkv * s.D, true}});
  if (!plan) return false;
  if (plan->packed_stats)
    stats_transpose(reinterpret_cast<float*>(static_cast<char*>(plan->workspace) + plan->stats_offset), lse, s, false,
                    stream);
  return run(*plan, dq, dk, dv, why, true);
}

void attention_cudnn_reset_plans() {
  cudaDeviceSynchronize();  // no queued call still uses a workspace freed below
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.plans.clear();
  c.refused.clear();
  c.lists.clear();
}

bool attention_cudnn_plan_info(bool backward, const AttentionCudaParams& p, AttentionCudnnPlanInfo* info) {
  Shape s{};
  if (!shape_of(p, &s, nullptr)) return false;
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  // The shape's plan on any stream (the first made, in key order).
  const auto it = std::find_if(c.plans.begin(), c.plans.end(), [&](const auto& kv) {
    const PlanKey& k = kv.first;
    return std::get<0>(k) == backward && std::get<1>(k) == s.B && std::get<2>(k) == s.Sq && std::get<3>(k) == s.Skv &&
           std::get<4>(k) == s.Hq && std::get<5>(k) == s.Hkv && std::get<6>(k) == s.D;
  });
  if (it == c.plans.end()) return false;
  const Plan& plan = *it->second;
  *info = {plan.candidates, plan.chosen, plan.timed, plan.engine, plan.ms};
  return true;
}

#endif  // HLM_HAVE_CUDNN_HEADERS

}  // namespace hlm
