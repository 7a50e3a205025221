// CudaTrainDevice: upload, one optimisation step on GPU 0, and the copy back (contract in cuda_train_device.h).
#include "train/cuda/cuda_train_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device_query.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "layers/cuda/cuda_linear.h"
#include "models/cuda/cuda_model_train.h"
#include "ops/lm_head_loss/lm_head_loss_cuda.h"
#include "train/cuda/cuda_bf16_masters.h"
#include "train/cuda/cuda_eval.h"
#include "train/cuda/cuda_teacher_ahead.h"
#include "train/cuda/device_collectives.h"
#include "train/lm_head_chunking_text.h"
#include "train/memory_plan.h"

namespace hlm {

namespace {
OverridableSwitch g_teacher_overlap{"HLM_TEACHER_OVERLAP", false};
}  // namespace

void cuda_train_set_teacher_overlap(int on) { g_teacher_overlap.set(on); }
bool cuda_train_teacher_overlap() { return g_teacher_overlap.on(); }

namespace {

double gib(size_t bytes) { return static_cast<double>(bytes) / 1073741824.0; }

// The CUDA loss's chunking for a chosen one (nullopt: the loss's default).
LmHeadCudaChunking as_cuda_chunking(const std::optional<LmHeadChunking>& c) {
  return c ? LmHeadCudaChunking{.vocab_chunk = c->vocab_chunk, .row_block = c->row_block} : LmHeadCudaChunking{};
}

// The given chunking, else HLM_LM_HEAD_CHUNKING's, else nullopt (the loss's default); checked here, not at the first
// step.
std::optional<LmHeadChunking> resolve_loss_chunking(const std::optional<LmHeadChunking>& option) {
  std::optional<LmHeadChunking> c = option;
  if (!c) {
    const char* e = std::getenv("HLM_LM_HEAD_CHUNKING");
    if (e != nullptr && *e != '\0') c = parse_lm_head_chunking(e);
  }
  lm_head_cuda_check_chunking(as_cuda_chunking(c));
  return c;
}

// HLM_PROFILE_STEP=1 (read once): the step's and the attach's phase timers below print; off by default.
bool profile_step_enabled() {
  static const bool on = std::getenv("HLM_PROFILE_STEP") != nullptr;
  return on;
}

// HLM_PROFILE_STEP=1: each micro-batch prints the GPU milliseconds of its phases (CUDA events on the stream; adds no
// host wait until the end of the micro-batch). For finding where a step's time goes; off by default.
class PhaseTimer {
 public:
  explicit PhaseTimer(cudaStream_t stream) : stream_(stream), on_(profile_step_enabled()) {}
  ~PhaseTimer() {
    for (auto& [name, e] : marks_) cudaEventDestroy(e);
  }
  void mark(const char* name) {
    if (!on_) return;
    cudaEvent_t e;
    HLM_CUDA_CHECK(cudaEventCreate(&e));
    HLM_CUDA_CHECK(cudaEventRecord(e, stream_));
    marks_.emplace_back(name, e);
  }
  void print() {
    if (!on_ || marks_.empty()) return;
    HLM_CUDA_CHECK(cudaEventSynchronize(marks_.back().second));
    std::string line = "profile     ";
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0.0f;
      HLM_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second));
      line += str_cat(" ", marks_[i].first, " ", ms, " ms;");
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  cudaStream_t stream_;
  bool on_;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;
};

// The attach's phases in host seconds, each after a synchronization (HLM_PROFILE_STEP=1, as PhaseTimer; nothing
// otherwise): one stderr line "profile      attach: <phase> <s> s; ...".
class AttachTimer {
 public:
  explicit AttachTimer(CudaContext& ctx) : ctx_(ctx), on_(profile_step_enabled()) {}
  void mark(const char* phase) {
    if (!on_) return;
    ctx_.synchronize();
    const auto now = std::chrono::steady_clock::now();
    line_ += str_cat(" ", phase, " ", std::chrono::duration<double>(now - last_).count(), " s;");
    last_ = now;
  }
  void print() const {
    if (on_) std::fprintf(stderr, "profile      attach:%s\n", line_.c_str());
  }

 private:
  CudaContext& ctx_;
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string line_;
};

// At most this many captured steps are kept (one per batch shape; least recently used dropped first). 300 steps of
// Table 14's synth model at 64 items per step (--bucket-tokens 128) meet ~22 shapes (~38 without the rounding of the
// longest sequence below; a simulation of the item lengths; 16 on the H200, 2026-12-02); each graph keeps its step's
// activations in its private pool (not measured; the eager step's peak there was 0.25-0.32 GiB in all).
constexpr size_t kMaxStepGraphs = 64;
// The captured steps' longest-sequence key is rounded up to a multiple of this (see graph_step).
constexpr int64_t kLongestRound = 64;

}  // namespace

// One captured step: the graph and the fixed device buffers it reads and writes.
struct CudaTrainDevice::StepGraph {
  CudaTokenBatch batch;                      // ids, cu_seqlens, positions, error flag (refilled before each replay)
  CudaTensor weights, targets;               // [N] loss weights and CE targets (refilled)
  CudaTensor per_token, result;              // [N] per-token CE, TokenLossCudaResult (written by each replay)
  size_t kept_bytes = 0;                     // the trace's activations (the memory plan line)
  std::unique_ptr<CudaGraph> graph;
};

CudaTrainDevice::CudaTrainDevice(const CudaTrainDeviceOptions& options) : options_(options) {
  HLM_CHECK_INPUT(cuda_available(), "--device cuda: no usable GPU (", cuda_unavailable_reason(), ")");
  ctx_ = &cuda_context();
  options_.cuda_graphs = step_graphs_enabled(options_.cuda_graphs);
  loss_chunking_ = resolve_loss_chunking(std::nullopt);
}

void CudaTrainDevice::set_loss_chunking(const std::optional<LmHeadChunking>& chunking) {
  loss_chunking_ = resolve_loss_chunking(chunking);
}

CudaTrainDevice::~CudaTrainDevice() {
  graphs_.reset();
  if (readback_ != nullptr) cudaFreeHost(readback_);
}

size_t CudaTrainDevice::free_memory_bytes() const {
  ctx_->make_current();
  size_t free = 0, total = 0;
  HLM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

std::string CudaTrainDevice::describe() const {
  const std::vector<CudaDeviceInfo> devices = cuda_devices();
  const auto it = std::find_if(devices.begin(), devices.end(),
                               [&](const CudaDeviceInfo& d) { return d.index == ctx_->device(); });
  if (it == devices.end()) return str_cat("cuda:", ctx_->device());
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(it->total_memory_bytes) / 1073741824.0);
  return str_cat("cuda:", it->index, " ", it->name, " (sm_", it->compute_major, it->compute_minor, ", ",
                 it->multiprocessors, " SMs, ", memory, "); fp32 weights, gradients and AdamW state",
                 options_.bf16 ? "; bf16 products (tensor cores, fp32 results)" : "; fp32 products",
                 options_.recompute == Recompute::None ? "; kept activations" : "",
                 loss_chunking_ ? "; loss chunking " + lm_head_chunking_text(*loss_chunking_) : std::string());
}

void CudaTrainDevice::set_data_parallel(Communicator& comm, int zero_stage, size_t bucket_elements) {
  ctx_->make_current();
  dp_ = std::make_unique<CudaDataParallel>(*ctx_, comm, make_device_collectives(*ctx_, comm), zero_stage,
                                           bucket_elements);
}

void CudaTrainDevice::attach(Model& student, Model* teacher, AdamW& optimizer) {
  ctx_->make_current();
  host_student_ = &student;
  host_optimizer_ = &optimizer;
  optimizer_.reset();  // holds pointers into the models below
  graphs_.reset();     // captured with the addresses of the tensors below
  graph_rope_ = nullptr;
  student_.reset();
  grads_.reset();
  teacher_ahead_.reset();  // holds the teacher
  teacher_.reset();
  const AdamWConfig& ac = optimizer.config();
  const bool bf16_masters = ac.master == MasterFormat::Bf16Sr;
  HLM_CHECK_INPUT(!bf16_masters || options_.bf16, "--memory-plan lean: bf16 master weights on the GPU need "
                  "--precision bf16");
  HLM_CHECK_INPUT(!dp_ || !bf16_masters || dp_->zero_stage() == 1 || dp_->size() == 1, "--memory-plan lean with "
                  "--zero-stage 0 on ", dp_ ? dp_->size() : 1, " ranks: the linears' gradients are bf16 and zero "
                  "stage 0 would round the summed gradients back into them; use --zero-stage 1 (the default)");
  const bool sharded = dp_ && dp_->zero_stage() == 1;
  // HLM_PROFILE_STEP=1: the host seconds of each attach phase, one line at the end (the 4B attach, 42 s on an H100
  // in session 36: mostly the 8-bit state's upload, now skipped for a fresh optimizer, the bf16 masters and the
  // gradient holder; docs/memory.md).
  AttachTimer timer(*ctx_);
  // The teacher first (its fp32 linears are freed below when held in bf16 only), then the student, then the
  // gradients: each upload's transient fp32 tensors meet the least memory already held.
  if (teacher != nullptr) teacher_.emplace(CudaModel::upload(*teacher, *ctx_));
  timer.mark("teacher upload");
  if (teacher_) {
    HLM_CHECK_INPUT(!teacher_bf16_only_ || options_.bf16, "--memory-plan: the teacher is held in bf16 only with "
                    "--precision bf16");
    // Teacher held once in bf16 (CudaModel::drop_fp32_weights, which turns the bf16 mode on itself, tensor by tensor
    // after the upload, as `generate --precision bf16` does): every linear, the head and the embedding in bf16 only (a
    // tied head and the lookup share one table), the norms fp32; the teacher has no backward and no update.
    if (teacher_bf16_only_)
      teacher_->drop_fp32_weights();
    else
      teacher_->set_bf16_compute(options_.bf16);
  }
  timer.mark("teacher bf16");
  student_.emplace(CudaModel::upload(student, *ctx_));
  timer.mark("student upload");
  student_->set_bf16_compute(options_.bf16);
  // lean: the linears' (and an untied head's) bf16 copies become the masters (the host AdamW holds every weight at a
  // bf16 value, so the copies are exact) and the linears' gradients are held in bf16 (cuda_bf16_masters.h).
  if (bf16_masters) cuda_hold_bf16_masters(*ctx_, *student_);
  timer.mark("student bf16");
  grads_.emplace(CudaModel::zeros_like(student.config(), *ctx_));
  if (bf16_masters) cuda_hold_bf16_linear_grads(*ctx_, *grads_);
  timer.mark("gradients");
  // ZeRO-1: the moments live in dp_'s shard only.
  optimizer_ = std::make_unique<CudaAdamW>(*ctx_, *student_, *grads_, ac.beta1, ac.beta2, ac.eps, ac.state, ac.master,
                                           ac.sr_seed, !sharded);
  // Each step writes the student's bf16 copies with the update (nothing in fp32 mode): no refresh pass after it.
  optimizer_->set_bf16_copies(student_->bf16_copies());
  // Pair the device's parameters with the host optimizer's by HF name; each gets the host state.
  const std::vector<AdamWParam>& host = optimizer.params();
  std::vector<CudaAdamWParam>& device = optimizer_->params();
  HLM_CHECK(device.size() == host.size(), "CudaTrainDevice: ", device.size(), " device parameters, ", host.size(),
            " in the host optimizer");
  host_index_.clear();
  for (size_t i = 0; i < device.size(); ++i) {
    const auto it =
        std::find_if(host.begin(), host.end(), [&](const AdamWParam& p) { return p.name == device[i].name; });
    HLM_CHECK(it != host.end(), "CudaTrainDevice: the host optimizer has no parameter ", device[i].name);
    const auto j = static_cast<size_t>(it - host.begin());
    host_index_.push_back(j);
    if (sharded) continue;  // dp_->attach takes this rank's shard below
    if (ac.state == AdamWStateFormat::Q8) {
      // A host optimizer whose moments are still initial holds the bytes CudaAdamW's constructor wrote (the
      // codebooks' zero codes, zero scales): nothing to upload (this upload took 17.0 s of the 4B attach on an H100,
      // session 36). Otherwise byte for byte.
      if (!optimizer.moments_initial()) optimizer_->set_q8_state(i, optimizer.q8_state(j));
    } else {
      optimizer_->set_state(i, optimizer.exp_avg(j), optimizer.exp_avg_sq(j));
    }
  }
  optimizer_->set_step_count(optimizer.step_count());
  timer.mark("optimizer state");
  // ZeRO-1 in the bf16 mode (HYBRIDLM_ZERO1_MASTERS=sharded, the default): the fp32 weights that have bf16 copies
  // (the linears, an untied head) are freed here, their masters kept by dp_ for this rank's shard only.
  // lean: the bf16 copies are the masters already (whole on every rank; dp_ shards their update and moments).
  if (sharded && options_.bf16 && !bf16_masters && zero1_masters_sharded_from_env())
    cuda_hold_bf16_masters(*ctx_, *student_);
  if (dp_) {
    dp_->attach(*optimizer_, optimizer, host_index_, student_->bf16_copies());
    // When each gradient is final in the backward (CudaModel::backward's layer_done): layer i's tensors after call
    // i, the final norm and an untied head after call L (the head's gradient comes from the loss, before the
    // backward), anything else (the embedding, a tied head) once the backward has returned.
    const int L = static_cast<int>(student.config().num_hidden_layers);
    std::vector<int> stages;
    for (const CudaAdamWParam& p : device) {
      int stage = -1;
      const size_t at = p.name.find("layers.");
      if (at != std::string::npos && (at == 0 || p.name[at - 1] == '.')) {
        const int layer = std::atoi(p.name.c_str() + at + 7);
        if (layer >= 0 && layer < L) stage = layer;
      } else if (p.name == "lm_head.weight" || p.name == "model.norm.weight") {
        stage = L;
      }
      stages.push_back(stage);
    }
    dp_->set_ready_stages(stages);
    const std::string masters =
        bf16_masters ? std::string("none (lean: the bf16 masters are whole on every rank, their update sharded)")
        : dp_->masters_sharded() ? str_cat("sharded (", dp_->master_shard_elements(), " elements on this rank)")
                                 : std::string("whole");
    std::printf("%-12s rank %d of %d, %s collectives, zero stage %d (%zu AdamW elements on this rank), gradient "
                "sums overlapped with the backward: %s; fp32 masters of the bf16 copies: %s\n",
                "data parallel", dp_->rank(), dp_->size(), dp_->backend(), dp_->zero_stage(),
                sharded ? dp_->shard_elements() : static_cast<size_t>(student_->weight_bytes() / 4),
                dp_->overlap() ? "on" : "off", masters.c_str());
  }
  if (options_.cuda_graphs) {
    graphs_ = std::make_unique<StepGraphCache<StepGraph>>(kMaxStepGraphs);
    // The rope table at its full length up front (up to 8192 positions), so that a longer batch later does not move
    // it (which would drop every graph): its values depend on the position only. A rope that refuses that length
    // (dynamic rope's limit) grows with the batches instead.
    try {
      student_->rope_for_positions(std::min<int64_t>(student.config().max_position_embeddings, 8192));
    } catch (const Error&) {
    }
  }
  ctx_->synchronize();
  timer.mark("the rest");
  timer.print();
  activation_plan_printed_ = false;
  print_static_plan();
}

void CudaTrainDevice::print_static_plan() const {
  const size_t weights = student_->weight_bytes(), copies = student_->bf16_copy_bytes();
  size_t moments = 2 * weights;  // AdamW m and v fp32 like the weights, or 8-bit codes + one f32 scale per block
  if (dp_ && dp_->zero_stage() == 1) moments = 2 * sizeof(float) * dp_->shard_elements();  // this rank's shard
  if (optimizer_->state_format() == AdamWStateFormat::Q8) {
    moments = 0;
    if (dp_ && dp_->zero_stage() == 1)  // this rank's shard: codes and one f32 scale per block, for m and v
      moments = 2 * dp_->shard_elements() + 8 * (dp_->shard_elements() / static_cast<size_t>(kQ8Block));
    else
      for (const CudaAdamWParam& p : optimizer_->params())
        moments += 2 * static_cast<size_t>(p.param->numel()) + 8 * static_cast<size_t>(q8_blocks(p.param->numel()));
  }
  const size_t grads = grads_->weight_bytes();
  const size_t teacher = teacher_ ? teacher_->weight_bytes() + teacher_->bf16_copy_bytes() : 0;
  // ZeRO-1 with sharded masters: the fp32 masters of the linears (and an untied head) for this rank's shard only.
  const size_t master_shard = dp_ && dp_->masters_sharded() ? sizeof(float) * dp_->master_shard_elements() : 0;
  // ZeRO-1: the summed gradients of this rank's shard (fp32; none under lean: they go back into the gradients).
  const size_t grad_shard = dp_ && dp_->zero_stage() == 1 ? dp_->gradient_shard_bytes() : 0;
  const size_t total = weights + master_shard + copies + grads + grad_shard + moments + teacher;
  const bool masters = host_optimizer_->config().master == MasterFormat::Bf16Sr;
  char shard_text[64] = "", grad_shard_text[64] = "";
  if (master_shard > 0)
    std::snprintf(shard_text, sizeof shard_text, " + %.2f GiB fp32 master shard", gib(master_shard));
  if (grad_shard > 0)
    std::snprintf(grad_shard_text, sizeof grad_shard_text, " + %.2f GiB gradient shard", gib(grad_shard));
  std::printf("%-12s student %.2f GiB fp32 weights%s + %.2f GiB %s, %.2f GiB gradients%s%s, %.2f GiB AdamW "
              "m and v (%s%s); teacher %.2f GiB%s; %.2f GiB before activations (device allocations; %.3f GiB in use "
              "on the device after attach)\n",
              "memory plan", gib(weights), shard_text, gib(copies),
              masters ? "bf16 (the linears' masters and the head's copy)" : "bf16 copies", gib(grads),
              masters ? " (the linears' in bf16)" : "", grad_shard_text, gib(moments),
              adamw_state_format_name(optimizer_->state_format()),
              dp_ && dp_->zero_stage() == 1 ? str_cat(", this rank's shard of ", dp_->size()).c_str() : "",
              gib(teacher),
              teacher_bf16_only_ ? " (bf16 only)" : "", gib(total), gib(ctx_->allocator().stats().bytes_in_use));
  std::fflush(stdout);
}

void CudaTrainDevice::print_activation_plan(size_t kept_bytes, int64_t micro_tokens) const {
  // kept_bytes: the step's own record (BatchLoss::kept_bytes, the trace micro_step keeps), not a second estimate.
  const CudaAllocatorStats st = ctx_->allocator().stats();
  const char* what = options_.recompute == Recompute::None
                         ? "layer inputs and every layer's intermediates; --recompute none"
                         : "layer inputs; each layer recomputes its own in the backward";
  std::printf("%-12s activations: %.2f GiB kept per micro-batch of %lld tokens (%s); peak device memory in use after "
              "the first step %.2f GiB\n",
              "memory plan", gib(kept_bytes), static_cast<long long>(micro_tokens), what, gib(st.peak_bytes_in_use));
  std::fflush(stdout);
}

BatchLoss CudaTrainDevice::step(const PackedBatch& batch, int64_t micro_rows, double tau, double clip,
                                double* grad_norm, size_t num_languages) {
  HLM_CHECK(optimizer_ != nullptr, "CudaTrainDevice::step before attach");
  HLM_CHECK(micro_rows > 0 && batch.rows % micro_rows == 0, "batch of ", batch.rows, " rows, micro-batch ",
            micro_rows);
  ctx_->make_current();
  BatchLoss out;
  out.sum_by_language.assign(num_languages, 0.0);
  out.count_by_language.assign(num_languages, 0);
  const auto count = [&](const PackedBatch& b) -> int64_t {
    return teacher_ ? b.batch.total_tokens()
                    : std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; });
  };
  // The loss weights of the whole (global) batch, as train_batch_gradient.
  const int64_t counted = count(batch);
  const float weight = counted > 0 ? static_cast<float>(1.0 / static_cast<double>(counted)) : 0.0f;
  // Data parallel: this rank's rows only; its record counts its own tokens (summed over ranks below).
  PackedBatch share;
  if (dp_) {
    const auto [first, last] = dp_->rows(batch.rows);
    HLM_CHECK((last - first) % micro_rows == 0, "a rank's ", last - first, " rows, micro-batch ", micro_rows);
    share = packed_batch_rows(batch, first, last);
  }
  const PackedBatch& mine = dp_ ? share : batch;
  out.counted = dp_ ? count(mine) : counted;

  const bool replayed = graphs_ != nullptr && !teacher_ && mine.rows == micro_rows &&
                        graph_step(mine, weight, num_languages, out);
  if (!replayed) {
    grads_->set_zero();
    // HLM_TEACHER_OVERLAP: each micro-batch's backward runs beside the next one's teacher forward (cuda_teacher_ahead.h).
    const bool overlap = teacher_ && cuda_train_teacher_overlap();
    if (overlap && teacher_ahead_ == nullptr) teacher_ahead_ = std::make_unique<CudaTeacherAhead>(*ctx_, *teacher_);
    if (!overlap) teacher_ahead_.reset();
    if (teacher_ahead_) teacher_ahead_->drop();  // a step that threw may have left one queued
    std::vector<PackedBatch> micros;
    for (int64_t r = 0; r < mine.rows; r += micro_rows)
      micros.push_back(mine.rows == micro_rows ? mine : packed_batch_rows(mine, r, r + micro_rows));
    for (size_t i = 0; i < micros.size(); ++i) {
      const bool last = i + 1 == micros.size();
      micro_step(micros[i], overlap && !last ? &micros[i + 1] : nullptr, weight, tau, num_languages, out, last);
    }
  }
  if (dp_) {
    dp_->finish_gradient_sums();  // the sums queued during the last backward (overlap), before any other collective
    dp_->reduce_loss(out);        // every rank then decides alike whether to update
  }
  // Each parameter's lr and weight decay from its host group (the trainer applied the schedule already).
  const std::vector<AdamWGroup>& groups = host_optimizer_->groups();
  const std::vector<AdamWParam>& host = host_optimizer_->params();
  std::vector<CudaAdamWParam>& device = optimizer_->params();
  for (size_t i = 0; i < device.size(); ++i) {
    const AdamWGroup& g = groups[static_cast<size_t>(host[host_index_[i]].group)];
    device[i].lr = g.lr;
    device[i].weight_decay = g.weight_decay;
  }
  // CudaAdamW::step skips a non-finite norm itself; a non-finite loss with a finite norm must skip too (CPU rule).
  PhaseTimer timer(ctx_->stream());
  timer.mark("start");
  if (dp_ && dp_->zero_stage() == 1) {
    *grad_norm = dp_->sharded_step(clip, std::isfinite(out.loss));
  } else {
    if (dp_) dp_->all_reduce_gradients();
    *grad_norm = std::isfinite(out.loss) ? optimizer_->step(clip) : optimizer_->grad_norm();
  }
  timer.mark("adamw");
  // The bf16 copies follow the updated master weights: written by the AdamW launch itself (set_bf16_copies at
  // attach), so this mark measures ~0; a skipped step changed no weight. Nothing in fp32 mode.
  if (host_optimizer_->config().master == MasterFormat::Bf16Sr) {
    cuda_refresh_held_copies(*ctx_, *student_);  // lean: a tied head's copy only (the rest are the masters)
  } else if (dp_ && dp_->masters_sharded()) {
    // ZeRO-1, sharded masters: the copies of the freed weights were updated and gathered in bf16; a tied head's copy
    // follows the gathered fp32 embedding (with one rank the update wrote every copy).
    if (dp_->size() > 1) cuda_refresh_held_copies(*ctx_, *student_);
  } else if (!optimizer_->writes_bf16_copies() || (dp_ && dp_->zero_stage() == 1 && dp_->size() > 1)) {
    student_->refresh_bf16();  // ZeRO-1 on several ranks: the update wrote this rank's chunks' copies only
  }
  timer.mark("refresh_bf16");
  timer.print();
  if (!activation_plan_printed_) {
    activation_plan_printed_ = true;
    print_activation_plan(out.kept_bytes, batch.batch.total_tokens() / batch.rows * micro_rows);
  }
  return out;
}

void CudaTrainDevice::micro_step(const PackedBatch& micro, const PackedBatch* next, float weight, double tau,
                                 size_t num_languages, BatchLoss& out, bool last) {
  CudaContext& ctx = *ctx_;
  const int64_t N = micro.batch.total_tokens();
  PhaseTimer timer(ctx.stream());
  timer.mark("start");
  // The teacher's final hidden states only (nothing else of its forward is held through the student's step). Overlapped
  // (cuda_teacher_ahead.h): queued beside the previous micro-batch's backward, or for a step's first micro-batch
  // here, beside the student's forward; the main stream waits for it after the student's forward (the
  // teacher_forward mark then times that wait and follows student_forward). Else run here.
  std::unique_ptr<CudaTeacherOutput> teacher_out;
  const LmHeadCudaChunking chunking = as_cuda_chunking(loss_chunking_);
  if (teacher_ahead_) {
    if (!teacher_ahead_->pending_for(micro.batch, tau, chunking)) teacher_ahead_->queue(micro.batch, tau, chunking);
  } else if (teacher_) {
    teacher_out = cuda_teacher_forward(*teacher_, micro.batch, tau, chunking, false);
    timer.mark("teacher_forward");
  }
  const CudaTrainTrace trace = student_->forward_train(micro.batch, options_.recompute);
  timer.mark("student_forward");
  if (teacher_ahead_) {
    teacher_out = teacher_ahead_->take(micro.batch, tau, chunking);
    timer.mark("teacher_forward");
  }
  out.kept_bytes = std::max(out.kept_bytes, trace.kept_bytes());

  CudaTensor per_token = CudaTensor::empty(ctx, {N});
  CudaTensor result = cuda_scratch_bytes(ctx, sizeof(TokenLossCudaResult));
  const std::vector<float> host_weights(static_cast<size_t>(N), weight);
  CudaTensor weights = CudaTensor::empty(ctx, {N});
  cuda_copy_to_device_async(ctx, weights.raw(), host_weights.data(), host_weights.size() * sizeof(float));
  CudaTensor targets;
  if (!teacher_) {
    targets = CudaTensor::empty(ctx, {N}, DType::I32);
    cuda_copy_to_device_async(ctx, targets.raw(), micro.targets.data(), micro.targets.size() * sizeof(int32_t));
  }
  const CudaTensor d_hidden = head_loss(trace, teacher_out.get(), weights.data<float>(),
                                       teacher_ ? nullptr : targets.data<int32_t>(), per_token.data<float>(),
                                       result.raw(), tau);
  // Not held through the backward (work queued after the loss may reuse the blocks); the uploaded batch stays for
  // the flag check below.
  if (teacher_out) teacher_out->release_loss_inputs();
  timer.mark("loss");
  // The next micro-batch's teacher forward on the side stream, after the loss that read this one's (its blocks are
  // the side stream's pool's: cuda_teacher_ahead.h), beside the backward queued below.
  if (teacher_ahead_ && next != nullptr) teacher_ahead_->queue(next->batch, tau, chunking);
  // Data parallel, last micro-batch: each bucket's sum starts on the collectives' stream as soon as the backward
  // has finished its gradients (cuda_data_parallel.h, overlap).
  if (last && dp_ && dp_->overlap_begin()) {
    student_->backward(trace, d_hidden.data<float>(), *grads_, [this](int stage) { dp_->overlap_reached(stage); });
    dp_->overlap_reached(-1);
  } else {
    student_->backward(trace, d_hidden.data<float>(), *grads_);
  }
  timer.mark("student_backward");
  timer.print();

  // The loss record and the per-token values (waits for the stream; small: N floats).
  TokenLossCudaResult loss;
  cuda_copy_to_host(ctx, &loss, result.raw(), sizeof(loss));
  std::vector<float> values(static_cast<size_t>(N));
  cuda_copy_to_host(ctx, values.data(), per_token.raw(), values.size() * sizeof(float));
  // The teacher forward's error flag (the main stream ran or waited for it): a bad id for the teacher's vocabulary is
  // the same input error as CudaModel::forward_final_hidden's own check.
  if (teacher_out) teacher_out->check(ctx, teacher_->config().vocab_size);
  out.loss += loss.loss;
  for (int64_t t = 0; t < N; ++t) {
    if (!teacher_ && micro.targets[static_cast<size_t>(t)] < 0) continue;
    const auto lang = static_cast<size_t>(micro.language[static_cast<size_t>(t)]);
    HLM_CHECK(lang < num_languages, "token language ", lang, " outside the corpus's ", num_languages);
    out.sum_by_language[lang] += values[static_cast<size_t>(t)];
    ++out.count_by_language[lang];
  }
}


CudaTensor CudaTrainDevice::head_loss(const CudaTrainTrace& trace, const CudaTeacherOutput* teacher,
                                      const float* weights, const int32_t* targets, float* per_token, void* result,
                                      double tau) {
  CudaContext& ctx = *ctx_;
  const ModelConfig& c = student_->config();
  const int64_t N = trace.batch.view().tokens;
  CudaTensor d_hidden = CudaTensor::empty(ctx, {N, c.hidden_size});
  const LmHeadGradCuda grad{d_hidden.data<float>(), grads_->lm_head_weight()};
  CudaTensor student16;  // the bf16 rounding of the final hidden states (bf16 mode only)
  const LmHeadCuda student_head = student_->lm_head_for(trace.final_hidden.data<float>(), N, student16);
  auto* r = static_cast<TokenLossCudaResult*>(result);
  const LmHeadCudaChunking chunking = as_cuda_chunking(loss_chunking_);
  if (teacher != nullptr) {
    const LmHeadTeacherLogitsCuda logits = teacher->has_logits() ? teacher->teacher_logits() : LmHeadTeacherLogitsCuda{};
    const size_t bytes = lm_head_forward_kl_cuda_workspace_bytes(N, c.vocab_size, chunking, teacher->has_logits());
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    lm_head_forward_kl_cuda(ctx.blaslt(), per_token, r, static_cast<const float*>(teacher->hidden.raw()),
                            teacher->head, trace.final_hidden.data<float>(), student_head, N, tau, weights, &grad,
                            chunking, ws.raw(), bytes, teacher->has_logits() ? &logits : nullptr);
  } else {
    const size_t bytes = lm_head_cross_entropy_cuda_workspace_bytes(N, c.vocab_size, chunking);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    lm_head_cross_entropy_cuda(ctx.blaslt(), per_token, r, trace.final_hidden.data<float>(), N, student_head, targets,
                               weights, &grad, chunking, ws.raw(), bytes, nullptr);
  }
  return d_hidden;
}

bool CudaTrainDevice::graph_step(const PackedBatch& micro, float weight, size_t num_languages, BatchLoss& out) {
  CudaContext& ctx = *ctx_;
  const TokenBatch& tb = micro.batch;
  const int64_t N = tb.total_tokens();
  // The longest sequence rounded up to a multiple of 64 (the attention kernels' tile): max_seqlen only sizes their
  // grids (blocks past a sequence's end return at once), so one graph serves every batch whose sequences fit, with
  // the same bits as an eager step (attention_tc.cuh, seq_bounds).
  StepGraphKey key{N, tb.num_sequences(), 0};
  for (int64_t s = 0; s < key.sequences; ++s) key.longest = std::max(key.longest, tb.cu_seqlens[s + 1] - tb.cu_seqlens[s]);
  key.longest = (key.longest + kLongestRound - 1) / kLongestRound * kLongestRound;
  // The rope table grows (and moves) for a longer batch: eagerly here, never inside a capture; the graphs that read
  // the old table are dropped.
  const RopeCudaTable* rope = student_->rope_for_positions(key.longest);
  const float* rope_at = rope != nullptr ? rope->cos : nullptr;
  if (rope_at != graph_rope_) {
    graphs_->clear();
    graph_rope_ = rope_at;
  }
  const StepGraphAction action = graphs_->decide(key);
  if (action == StepGraphAction::Eager) {
    graphs_->count_eager();
    return false;
  }
  StepGraph* g = action == StepGraphAction::Replay ? graphs_->entry(key) : nullptr;
  std::unique_ptr<StepGraph> fresh;
  if (g == nullptr) {  // its buffers, filled with this step's batch (general blocks, made outside the capture)
    fresh = std::make_unique<StepGraph>();
    fresh->batch = CudaTokenBatch::upload(ctx, tb, key.longest);
    fresh->weights = CudaTensor::empty(ctx, {N});
    fresh->targets = CudaTensor::empty(ctx, {N}, DType::I32);
    fresh->per_token = CudaTensor::empty(ctx, {N});
    fresh->result = cuda_scratch_bytes(ctx, sizeof(TokenLossCudaResult));
    g = fresh.get();
  } else {
    g->batch.refill(ctx, tb);
  }
  const std::vector<float> host_weights(static_cast<size_t>(N), weight);
  HLM_CHECK(micro.targets.size() == static_cast<size_t>(N), "CudaTrainDevice: ", micro.targets.size(), " targets for ",
            N, " tokens");
  cuda_copy_to_device_async(ctx, g->weights.raw(), host_weights.data(), host_weights.size() * sizeof(float));
  cuda_copy_to_device_async(ctx, g->targets.raw(), micro.targets.data(), micro.targets.size() * sizeof(int32_t));
  if (fresh) {
    // The step's work, as micro_step queues it for one micro-batch without a teacher (and its gradient zeroing).
    StepGraph* e = fresh.get();
    std::string why;
    e->graph = CudaGraph::capture(
        ctx,
        [&] {
          grads_->set_zero();
          const CudaTrainTrace trace = student_->forward_train(e->batch, options_.recompute);
          e->kept_bytes = trace.kept_bytes();
          const CudaTensor d_hidden = head_loss(trace, nullptr, e->weights.data<float>(),
                                                e->targets.data<int32_t>(), e->per_token.data<float>(),
                                                e->result.raw(), 1.0);
          student_->backward(trace, d_hidden.data<float>(), *grads_);
        },
        &why);
    if (e->graph == nullptr) {
      graphs_->failed(key);
      graphs_->count_eager();
      std::fprintf(stderr, "note: CUDA graph capture of a training step (%lld tokens) failed, running it eagerly: %s\n",
                   static_cast<long long>(N), why.c_str());
      return false;
    }
    g = &graphs_->captured(key, std::move(fresh));
  }
  g->graph->launch();
  graphs_->count_replay();
  // One wait: the error flag, the loss record and the per-token values, into pinned memory.
  const size_t flag_at = 0, loss_at = 8, values_at = loss_at + sizeof(TokenLossCudaResult);
  const size_t bytes = values_at + static_cast<size_t>(N) * sizeof(float);
  if (readback_bytes_ < bytes) {
    if (readback_ != nullptr) HLM_CUDA_CHECK(cudaFreeHost(readback_));
    readback_ = nullptr;
    readback_bytes_ = 0;
    HLM_CUDA_CHECK(cudaMallocHost(&readback_, bytes));
    readback_bytes_ = bytes;
  }
  auto* host = static_cast<unsigned char*>(readback_);
  const cudaStream_t stream = ctx.stream();
  HLM_CUDA_CHECK(cudaMemcpyAsync(host + flag_at, g->batch.view().error_flag, sizeof(int), cudaMemcpyDeviceToHost,
                                 stream));
  HLM_CUDA_CHECK(cudaMemcpyAsync(host + loss_at, g->result.raw(), sizeof(TokenLossCudaResult),
                                 cudaMemcpyDeviceToHost, stream));
  HLM_CUDA_CHECK(cudaMemcpyAsync(host + values_at, g->per_token.raw(), static_cast<size_t>(N) * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
  ctx.synchronize();
  int flag = 0;
  std::memcpy(&flag, host + flag_at, sizeof(flag));
  if (flag != 0) cuda_check_batch_flag(ctx, g->batch, tb, student_->config().vocab_size);  // throws
  TokenLossCudaResult loss;
  std::memcpy(&loss, host + loss_at, sizeof(loss));
  const auto* values = reinterpret_cast<const float*>(host + values_at);
  out.loss += loss.loss;
  for (int64_t t = 0; t < N; ++t) {
    if (micro.targets[static_cast<size_t>(t)] < 0) continue;
    const auto lang = static_cast<size_t>(micro.language[static_cast<size_t>(t)]);
    HLM_CHECK(lang < num_languages, "token language ", lang, " outside the corpus's ", num_languages);
    out.sum_by_language[lang] += values[t];
    ++out.count_by_language[lang];
  }
  out.kept_bytes = std::max(out.kept_bytes, g->kept_bytes);
  return true;
}

void CudaTrainDevice::evaluate_pass(const PackedBatch& batch, EvalSums& sums) {
  HLM_CHECK(student_.has_value(), "CudaTrainDevice::evaluate_pass before attach");
  cuda_eval_pass(*ctx_, *student_, teacher_ ? &*teacher_ : nullptr, batch, sums);
}

void CudaTrainDevice::sync_to_host() {
  HLM_CHECK(optimizer_ != nullptr, "CudaTrainDevice::sync_to_host before attach");
  ctx_->make_current();
  if (host_optimizer_->config().master == MasterFormat::Bf16Sr) {  // lean: bf16 masters widened (the host's tensors)
    cuda_download_bf16_masters(*ctx_, *student_, host_optimizer_->params());
  } else if (dp_ && dp_->masters_sharded()) {  // collective: the fp32 tensors held, then the master shards gathered
    cuda_download_bf16_masters(*ctx_, *student_, host_optimizer_->params(), /*widen_copies=*/false);
    dp_->gather_masters(*host_optimizer_, host_index_);
  } else {
    student_->download_into(host_student_->mutable_weights());
  }
  if (dp_ && dp_->zero_stage() == 1) {  // collective: the shards' moments gathered on every rank
    dp_->gather_state(*host_optimizer_, host_index_);
  } else {
    for (size_t i = 0; i < host_index_.size(); ++i) {
      if (optimizer_->state_format() == AdamWStateFormat::Q8) {
        host_optimizer_->set_q8_state(host_index_[i], optimizer_->q8_state(i));
        continue;
      }
      const Tensor m = cuda_download(*ctx_, optimizer_->exp_avg(i));
      const Tensor v = cuda_download(*ctx_, optimizer_->exp_avg_sq(i));
      host_optimizer_->set_state(host_index_[i], m, v);
    }
    host_optimizer_->set_step_count(optimizer_->step_count());
  }
  if (graphs_ != nullptr) {
    const StepGraphStats& st = graphs_->stats();
    std::printf("%-12s %lld captured, %lld replays, %lld eager steps, %lld failed captures, %zu graphs kept\n",
                "cuda graphs", static_cast<long long>(st.captures), static_cast<long long>(st.replays),
                static_cast<long long>(st.eager_steps), static_cast<long long>(st.failures), graphs_->size());
    std::fflush(stdout);
  }
}

}  // namespace hlm
