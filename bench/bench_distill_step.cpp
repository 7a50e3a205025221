// One distillation step of the [perf] issue's configuration on GPU 0, timed end to end through the trainer's own
// device step (train/cuda/cuda_train_device.h: teacher forward, student forward, chunked LM-head forward KL,
// student backward, global-norm clip, AdamW), for comparison with the peer figure that
// ../shared/bench/peer_probe.py prints (HF transformers + FLA kernels, same shapes).
//   teacher: qwen3, 28 layers, hidden 1024, 16 heads / 8 kv heads of 128, MLP 3072, vocab 151,936, tied embedding;
//   student: the teacher converted with 3:1 GDN:attention (standard periodic placement) by Algorithm 1, which gives
//            the student an untied head (models/convert.h);
//   batch:   8 rows × 1024 tokens of random ids, one micro-batch, forward KL at τ = 1, clip 1, AdamW lr 1e-5.
// Random weights (Model::create, seed 1); the figures do not depend on the values.
// Prints per step: milliseconds (median of --steps timed steps after 2 warm-ups), tokens/s, the allocator's peak
// bytes in use and cudaMemGetInfo's used bytes, and the host-side memory plan. The timed steps run between
// cudaProfilerStart and cudaProfilerStop, the range the kernel tracer and ncu can be limited to (docs/profiling.md).
// --shape qwen3-4b / qwen3-1.7b: the teacher of that shape instead (36 layers, hidden 2560, 32 / 8 heads, MLP 9728;
// 28 layers, hidden 2048, 16 / 8 heads, MLP 6144); --micro R: micro-batches of R rows (gradient accumulation); a
// list (e.g. 2,4,8; ascending, so that a size that does not fit comes last) times each size in turn on the same
// attached device, the allocator's peaks reset between sizes;
// --memory-plan fp32|teacher-bf16|adam8|lean (train/memory_plan.h): the plan's teacher, AdamW and master formats, and
// its estimate; a comma-separated list (e.g. lean,adam8) runs each plan in turn on the same host models (one host
// setup), the device memory released and the allocator's peaks reset between plans. Per plan it prints the peak over
// the whole plan (attach included) and the peak of the steps alone (the peaks reset after attach).
// --data-parallel off|zero0|zero1[,...]: each entry runs the plans again, the device trained data parallel with ONE
// rank (TrainDevice::set_data_parallel over a SingleCommunicator; HYBRIDLM_GPU_COLLECTIVES picks nccl or host), so
// the step-time overhead of the distributed path against the plain step is measured in one process (issue #25);
// alternate them (off,zero1,off,zero1) to see the run-to-run spread. zero0 and zero1 overlap the gradient sums with
// the last micro-batch's backward as HYBRIDLM_DP_OVERLAP says (default on); zero0-blocking and zero1-blocking turn
// the overlap off (the sums after the backward). --recompute layer|none[,...]: the trainer's --recompute (none keeps
// every layer's intermediates for the backward instead of recomputing each layer's forward there; the GDN layers'
// chunked rule keeps its forward too); a list runs each in turn, inside each plan. --loss-chunking ROWSxCOLS|ROWSxfull
// [,...]: the training loss's chunking (CudaTrainDevice::set_loss_chunking; default: HLM_LM_HEAD_CHUNKING or the
// loss's 4096x4096), a list runs each in turn inside each recompute mode. Each step line ends with the loss and the norm in hex floats, so
// that entries can be compared bit for bit (every entry starts from the same host weights).
// --dw-paths overwrite|scratch|epilogue[,...]: how the lean plan's bf16 weight gradients take each micro-batch's
// product (layers/cuda/cuda_linear.h), set in-process for each entry in turn inside each micro-batch size (same
// attached device): overwrite = the first micro-batch writes bf16(dyᵀ·x), the later ones add through the fp32 scratch
// and round once; scratch = every micro-batch through the scratch (HLM_DW_BF16_OVERWRITE=off);
// epilogue = the first writes, the later ones take cuBLASLt's bf16 epilogue with beta 1 (HLM_DW_BF16_EPILOGUE=on:
// no scratch, two roundings; the default since session 38). Without the option the environment decides (line:
// dw=env).
// --mlp-gate-up fp32|bf16[,...]: the MLPs' gate and up products in fp32 or in bf16 (layers/mlp_bf16_gate_up.h,
// HLM_MLP_BF16_GATE_UP), set in-process for each entry in turn inside each weight-gradient path; without the option
// the environment decides (line: gate_up=env).
// --norm-bf16-out off|on[,...]: whether the pre-norm blocks' input norms also write their bf16 rounding for the
// branch's products (models/cuda/cuda_model.h, HLM_NORM_BF16_OUT; with --recompute none straight into the kept bf16
// input), set in-process for each entry in turn inside each gate/up form; without the option the environment decides
// (line: norm16=env).
// --matmul-autotune off|on[,...]: cuBLASLt's algorithm per GEMM shape timed among the heuristic's first 8 or its first
// taken (ops/matmul/matmul_cuda.h, HLM_MATMUL_AUTOTUNE), innermost; without the option the environment decides.
// --teacher-overlap off|on[,...]: each micro-batch's teacher forward on a side stream beside the previous
// micro-batch's student backward, a step's first beside the student's forward (train/cuda/cuda_train_device.h,
// HLM_TEACHER_OVERLAP), innermost; without the option the environment decides.
// --norm-bf16-dx off|on[,...]: the backward's norms also write the residual gradient's bf16 rounding for the branches'
// output projections (models/cuda/cuda_model.h, HLM_NORM_BF16_DX; the same bits), innermost but two; without the
// option the environment decides (line: normdx=env).
// --mlp-dh fp32|bf16[,...]: the MLP backward's dh (the down_proj product) in fp32 or in bf16 under the bf16 gate/up
// form (layers/mlp_bf16_gate_up.h, HLM_MLP_BF16_DH), innermost but one; without the option the environment decides
// (line: dh=env).
// --norm-fused-backward off|on[,...]: the block-path RMSNorm backward (hidden sizes 1,025-4,096) fused into one pass
// or as three (ops/rmsnorm/rmsnorm_cuda.h, HLM_RMSNORM_FUSED_BACKWARD, on by default), innermost;
// without the option the environment decides (line: normbwd=env).
// HLM_PROFILE_STEP=1 adds the GPU time of each phase per micro-batch and of the optimizer (cuda_train_device.cpp);
// HLM_BENCH_START_AFTER=FILE holds the GPU work back until FILE exists (see main); HLM_BENCH_TIME_AFTER=FILE lets the
// attach (uploads) run at once and holds back only the first step until FILE exists, so that the attach overlaps
// other GPU work of the same device call whose timings do not matter (tests) while the steps are timed alone.
// Usage: bench_distill_step [--precision fp32|bf16] [--steps N] [--warmup N (2)] [--rows R] [--micro R] [--seq T] [--layers L]
//                           [--shape qwen3-0.6b|qwen3-1.7b|qwen3-4b] [--memory-plan NAME] [--data-parallel LIST]
//                           [--recompute layer|none[,...]] [--loss-chunking ROWSxCOLS|ROWSxfull[,...]]
//                           [--dw-paths overwrite|scratch|epilogue[,...]] [--mlp-gate-up fp32|bf16[,...]] [--mlp-dh fp32|bf16[,...]]
//                           [--norm-bf16-dx off|on[,...]]
//                           [--norm-bf16-out off|on[,...]] [--matmul-autotune off|on[,...]]
//                           [--teacher-overlap off|on[,...]] [--norm-fused-backward off|on[,...]]
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_context.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/mlp_bf16_gate_up.h"
#include "models/convert.h"
#include "models/cuda/cuda_model.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/model_train.h"
#include "models/placements.h"
#include "train/adamw.h"
#include "train/data_parallel.h"
#include "train/memory_plan.h"
#include "train/cuda/cuda_train_device.h"
#include "train/lm_head_chunking_text.h"

using namespace hlm;

namespace {

// --dw-paths: the bf16 weight-gradient path's two switches (cuda_linear.h) for one entry.
struct DwPath {
  const char* name;
  int overwrite, epilogue;  // OverridableSwitch::set values (-1: the environment's)
};
constexpr DwPath kEnvDwPath{"env", -1, -1};  // without --dw-paths: both left to the environment
constexpr DwPath kDwPaths[] = {{"overwrite", 1, 0}, {"scratch", 0, 0}, {"epilogue", 1, 1}};

// --mlp-gate-up, --norm-bf16-out, --matmul-autotune, --teacher-overlap, --norm-fused-backward: one entry's value of
// an overridable on/off switch (core/env_switch.h: 1 on, 0 off, -1 the environment's).
struct SwitchEntry {
  const char* name;
  int value;  // OverridableSwitch::set value (-1: the environment's)
};
constexpr SwitchEntry kEnvSwitch{"env", -1};
constexpr SwitchEntry kGateUpForms[] = {{"fp32", 0}, {"bf16", 1}};
constexpr SwitchEntry kOnOff[] = {{"off", 0}, {"on", 1}};

struct Options {
  std::string precision = "bf16";
  int steps = 5;
  int warmup = 2;  // --warmup: untimed steps before the timed ones, per entry
  int64_t rows = 8, seq = 1024;
  int layers = 28;
  std::string micro = "0";  // 0: one micro-batch of all rows; a comma-separated list times each
  std::string shape = "qwen3-0.6b", memory_plan = "fp32", data_parallel = "off", recompute = "layer";
  std::string loss_chunking;  // empty: the device's default (HLM_LM_HEAD_CHUNKING or 4096x4096)
  std::vector<std::optional<LmHeadChunking>> chunkings;  // loss_chunking parsed; {nullopt} when empty
  std::vector<const DwPath*> dw_paths;  // --dw-paths; {&kEnvDwPath} without the option
  std::vector<const SwitchEntry*> gate_ups;  // --mlp-gate-up; {&kEnvSwitch} without the option
  std::vector<const SwitchEntry*> norm16s;   // --norm-bf16-out; {&kEnvSwitch} without the option
  std::vector<const SwitchEntry*> autotunes; // --matmul-autotune; likewise
  std::vector<const SwitchEntry*> overlaps;  // --teacher-overlap; likewise
  std::vector<const SwitchEntry*> norm_bwds; // --norm-fused-backward; likewise
  std::vector<const SwitchEntry*> dhs;       // --mlp-dh; likewise
  std::vector<const SwitchEntry*> norm_dxs;  // --norm-bf16-dx; likewise
};

// The row of `table` whose .name is `name`; otherwise says that `option` takes one of the table's names and exits 2.
template <class Row, size_t N>
const Row& row_named(const Row (&table)[N], const std::string& name, const char* option) {
  for (const Row& row : table)
    if (name == row.name) return row;
  std::string names;
  for (const Row& row : table) names += std::string(names.empty() ? "" : ", ") + row.name;
  std::fprintf(stderr, "%s: '%s' is not one of %s\n", option, name.c_str(), names.c_str());
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// When environment variable `env` names a file, waits until that file exists and says how long it waited.
void wait_for_gate(const char* env, const char* what) {
  const char* gate = std::getenv(env);
  if (gate == nullptr || *gate == '\0') return;
  const auto w0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(gate)) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::printf("waited %.1f s for %s%s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count(),
              gate, what);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--precision") o.precision = next();
    else if (a == "--steps") o.steps = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--rows") o.rows = std::atoll(next().c_str());
    else if (a == "--seq") o.seq = std::atoll(next().c_str());
    else if (a == "--layers") o.layers = std::atoi(next().c_str());
    else if (a == "--micro") o.micro = next();
    else if (a == "--shape") o.shape = next();
    else if (a == "--memory-plan") o.memory_plan = next();
    else if (a == "--data-parallel") o.data_parallel = next();
    else if (a == "--recompute") o.recompute = next();
    else if (a == "--loss-chunking") o.loss_chunking = next();
    else if (a == "--dw-paths") {
      for (const std::string& name : split_list(next())) o.dw_paths.push_back(&row_named(kDwPaths, name, "--dw-paths"));
    } else if (a == "--mlp-gate-up") {
      for (const std::string& name : split_list(next()))
        o.gate_ups.push_back(&row_named(kGateUpForms, name, "--mlp-gate-up"));
    } else if (a == "--norm-bf16-out") {
      for (const std::string& name : split_list(next()))
        o.norm16s.push_back(&row_named(kOnOff, name, "--norm-bf16-out"));
    } else if (a == "--matmul-autotune") {
      for (const std::string& name : split_list(next()))
        o.autotunes.push_back(&row_named(kOnOff, name, "--matmul-autotune"));
    } else if (a == "--teacher-overlap") {
      for (const std::string& name : split_list(next()))
        o.overlaps.push_back(&row_named(kOnOff, name, "--teacher-overlap"));
    } else if (a == "--norm-bf16-dx") {
      for (const std::string& name : split_list(next()))
        o.norm_dxs.push_back(&row_named(kOnOff, name, "--norm-bf16-dx"));
    } else if (a == "--mlp-dh") {
      for (const std::string& name : split_list(next())) o.dhs.push_back(&row_named(kGateUpForms, name, "--mlp-dh"));
    } else if (a == "--norm-fused-backward") {
      for (const std::string& name : split_list(next()))
        o.norm_bwds.push_back(&row_named(kOnOff, name, "--norm-fused-backward"));
    }
    else {
      std::fprintf(stderr, "usage: bench_distill_step [--precision fp32|bf16] [--steps N] [--warmup N] [--rows R] [--seq T] "
                           "[--layers L] [--micro R] [--shape qwen3-0.6b|qwen3-1.7b|qwen3-4b] [--memory-plan NAME] "
                           "[--data-parallel off|zero0|zero1,...] [--recompute layer|none,...] "
                           "[--loss-chunking ROWSxCOLS|ROWSxfull,...] [--dw-paths overwrite|scratch|epilogue,...] "
                           "[--mlp-gate-up fp32|bf16,...] [--norm-bf16-out off|on,...] "
                           "[--matmul-autotune off|on,...] [--teacher-overlap off|on,...] "
                           "[--norm-fused-backward off|on,...] [--mlp-dh fp32|bf16,...] [--norm-bf16-dx off|on,...]\n");
      std::exit(2);
    }
  }
  // Checked here, before the minute of model set-up.
  if (o.steps < 1 || o.warmup < 0) {
    std::fprintf(stderr, "--steps needs at least 1 and --warmup at least 0 (got %d and %d)\n", o.steps, o.warmup);
    std::exit(2);
  }
  for (const std::string& t : o.loss_chunking.empty() ? std::vector<std::string>{} : split_list(o.loss_chunking)) {
    try {
      o.chunkings.push_back(parse_lm_head_chunking(t));
    } catch (const Error& e) {
      std::fprintf(stderr, "--loss-chunking: %s\n", e.what());
      std::exit(2);
    }
  }
  if (o.chunkings.empty()) o.chunkings.push_back(std::nullopt);  // the device's default
  if (o.dw_paths.empty()) o.dw_paths.push_back(&kEnvDwPath);
  if (o.gate_ups.empty()) o.gate_ups.push_back(&kEnvSwitch);
  if (o.norm16s.empty()) o.norm16s.push_back(&kEnvSwitch);
  if (o.autotunes.empty()) o.autotunes.push_back(&kEnvSwitch);
  if (o.overlaps.empty()) o.overlaps.push_back(&kEnvSwitch);
  if (o.norm_bwds.empty()) o.norm_bwds.push_back(&kEnvSwitch);
  if (o.dhs.empty()) o.dhs.push_back(&kEnvSwitch);
  if (o.norm_dxs.empty()) o.norm_dxs.push_back(&kEnvSwitch);
  return o;
}

ModelConfig teacher_config(int layers, const std::string& shape) {
  struct Dims {
    const char* name;
    int layers, hidden, heads, kv, mlp;
  };
  const Dims table[] = {{"qwen3-0.6b", 0, 1024, 16, 8, 3072}, {"qwen3-1.7b", 28, 2048, 16, 8, 6144},
                        {"qwen3-4b", 36, 2560, 32, 8, 9728}};
  const Dims& d = row_named(table, shape, "--shape");
  const nlohmann::json j = {{"architectures", {"Qwen3ForCausalLM"}},
                            {"model_type", "qwen3"},
                            {"num_hidden_layers", d.layers > 0 ? d.layers : layers},
                            {"hidden_size", d.hidden},
                            {"num_attention_heads", d.heads},
                            {"num_key_value_heads", d.kv},
                            {"head_dim", 128},
                            {"intermediate_size", d.mlp},
                            {"vocab_size", 151936},
                            {"max_position_embeddings", 4096},
                            {"rms_norm_eps", 1e-6},
                            {"rope_theta", 1000000.0},
                            {"tie_word_embeddings", true}};
  return parse_model_config(j, "bench teacher");
}

int64_t count_parameters(Model& m) {
  // The weights stand in for the gradient slots too: only the shapes are read (no zero-filled copy of the model).
  DecoderWeights& w = m.mutable_weights();
  int64_t n = 0;
  for (const NamedParameter& p : named_parameters(m.config(), w, w)) n += p.value.numel();
  return n;
}

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: a run killed by a time limit keeps what it printed
  const Options o = parse(argc, argv);
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig tc = teacher_config(o.layers, o.shape);
  const int layers = static_cast<int>(tc.num_hidden_layers);
  Model teacher = Model::create(tc, 1);
  const int full = std::max(1, layers / 4);
  const std::vector<int> full_layers = placement_layers(Placement::StandardPeriodic, layers, full);
  Model student = convert_to_hybrid(teacher, full_layers, ConvertOptions{});
  std::printf("setup: teacher %lld params, student %lld params, built on the host in %.1f s\n",
              static_cast<long long>(count_parameters(teacher)), static_cast<long long>(count_parameters(student)),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  // The host AdamW's gradient slots: the device trains with its own gradients and never reads these, so they are
  // shapes only (no 20.5-GB memset for the 4B student).
  DecoderWeights grads = unfilled_weights_like(student.config());
  std::vector<int64_t> micros;
  for (const std::string& m : split_list(o.micro)) {
    const int64_t r = std::atoll(m.c_str());
    if (r < 0 || r > o.rows || (r > 0 && o.rows % r != 0)) {
      std::fprintf(stderr, "--micro: '%s' does not divide --rows %lld\n", m.c_str(), static_cast<long long>(o.rows));
      return 2;
    }
    micros.push_back(r > 0 ? r : o.rows);
  }
  PackedBatch batch;
  for (int64_t r = 0; r < o.rows; ++r) {
    std::vector<int32_t> ids(static_cast<size_t>(o.seq));
    for (int64_t t = 0; t < o.seq; ++t)
      ids[static_cast<size_t>(t)] =
          std::min<int32_t>(151935, static_cast<int32_t>(151936.0f * rng_uniform(7, static_cast<uint64_t>(r),
                                                                                  static_cast<uint64_t>(t))));
    batch.batch.add_sequence(ids);
  }
  batch.targets.assign(static_cast<size_t>(o.rows * o.seq), -100);
  batch.language.assign(static_cast<size_t>(o.rows * o.seq), 0);
  batch.rows = o.rows;

  const std::vector<std::string> plans = split_list(o.memory_plan), dps = split_list(o.data_parallel);
  std::vector<Recompute> recomputes;
  for (const std::string& r : split_list(o.recompute)) {
    if (r != "layer" && r != "none") {
      std::fprintf(stderr, "--recompute: '%s' is not layer or none\n", r.c_str());
      return 2;
    }
    recomputes.push_back(recompute_from_name(r));
  }
  for (const std::string& dp : dps)
    if (dp != "off" && dp != "zero0" && dp != "zero1" && dp != "zero0-blocking" && dp != "zero1-blocking") {
      std::fprintf(stderr, "--data-parallel: '%s' is not off, zero0, zero1, zero0-blocking or zero1-blocking\n",
                   dp.c_str());
      return 2;
    }
  SingleCommunicator single;
  // HLM_BENCH_START_AFTER=FILE: the GPU work starts once FILE exists (other GPU work of the same device call first,
  // while this process builds its host models).
  wait_for_gate("HLM_BENCH_START_AFTER", "");
  CudaAllocator& allocator = cuda_context().allocator();
  for (const std::string& dp : dps)
  for (const std::string& plan_name : plans)
  for (const Recompute recompute : recomputes)
  for (const std::optional<LmHeadChunking>& chunking : o.chunkings) {
    const MemoryPlanOption& plan = memory_plan_named(plan_name);
    allocator.release_cached();
    allocator.reset_peaks();
    std::vector<AdamWGroup> groups = {{"all", 1e-5, 0.01, 1e-5}};
    std::vector<AdamWParam> params;
    for (const NamedParameter& p : named_parameters(student.config(), student.mutable_weights(), grads))
      params.push_back({p.name, p.value, p.grad, 0});
    AdamWConfig adamw_config;
    adamw_config.state = plan.state;
    adamw_config.master = plan.master;
    adamw_config.sr_seed = 1;
    AdamW optimizer(std::move(groups), std::move(params), adamw_config);
    MemoryPlanInputs plan_in{student.config(), &teacher.config(), o.precision == "bf16", micros.front() * o.seq};
    plan_in.gpu = true;
    plan_in.recompute = recompute;
    plan_in.micro_batch_sequences = micros.front();  // one sequence per row here
    std::printf("%s\n", memory_plan_describe({&plan, memory_plan_estimate(plan, plan_in), "--memory-plan"}).c_str());

    CudaTrainDeviceOptions dev_options;
    dev_options.bf16 = o.precision == "bf16";
    dev_options.recompute = recompute;
    CudaTrainDevice device(dev_options);
    device.set_memory_plan(plan);
    if (chunking) device.set_loss_chunking(chunking);
    const bool blocking = dp.find("-blocking") != std::string::npos;
    const char* overlap_env = std::getenv("HYBRIDLM_DP_OVERLAP");
    const std::string overlap_was = overlap_env != nullptr ? overlap_env : "";
    if (blocking) setenv("HYBRIDLM_DP_OVERLAP", "off", 1);
    if (dp != "off") device.set_data_parallel(single, dp.rfind("zero1", 0) == 0 ? 1 : 0,
                                             bucket_elements_from_env(kGpuBucketElements));
    if (blocking) {  // read by set_data_parallel only
      if (overlap_env != nullptr) setenv("HYBRIDLM_DP_OVERLAP", overlap_was.c_str(), 1);
      else unsetenv("HYBRIDLM_DP_OVERLAP");
    }
    std::printf("device: %s, precision %s\n", device.describe().c_str(), o.precision.c_str());
    const auto a0 = std::chrono::steady_clock::now();
    device.attach(student, &teacher, optimizer);
    cudaDeviceSynchronize();
    const CudaAllocatorStats after_attach = allocator.stats();
    std::printf("attach: %.1f s, %.2f GiB in use after it (peak during it %.2f GiB)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count(),
                gib(after_attach.bytes_in_use), gib(after_attach.peak_bytes_in_use));
    const size_t attach_peak = after_attach.peak_bytes_in_use;
    wait_for_gate("HLM_BENCH_TIME_AFTER", " before the steps");
    for (const int64_t micro : micros)
    for (const DwPath* path : o.dw_paths)
    for (const SwitchEntry* gate_up : o.gate_ups)
    for (const SwitchEntry* norm16 : o.norm16s)
    for (const SwitchEntry* autotune : o.autotunes)
    for (const SwitchEntry* overlap : o.overlaps)
    for (const SwitchEntry* norm_dx : o.norm_dxs)
    for (const SwitchEntry* dh : o.dhs)
    for (const SwitchEntry* norm_bwd : o.norm_bwds) {
      const DwPath& dw = *path;
      cuda_linear_set_dw_bf16_overwrite(dw.overwrite);
      cuda_linear_set_dw_bf16_epilogue(dw.epilogue);
      mlp_set_bf16_gate_up(gate_up->value);
      cuda_model_set_norm_bf16_out(norm16->value);
      matmul_cuda_set_autotune(autotune->value);
      cuda_train_set_teacher_overlap(overlap->value);
      rmsnorm_cuda_set_fused_backward(norm_bwd->value);
      mlp_set_bf16_dh(dh->value);
      cuda_model_set_norm_bf16_dx(norm_dx->value);
      allocator.reset_peaks();

      std::vector<double> ms;
      for (int s = 0; s < o.steps + o.warmup; ++s) {
        double norm = 0.0;
        // The timed steps form the profiler range (docs/profiling.md: HLM_TRACE_RANGE=profiler); a no-op otherwise.
        // Synchronized first: the tracer counts work that starts inside the range.
        if (s == o.warmup) {
          cudaDeviceSynchronize();
          cudaProfilerStart();
        }
        const auto a = std::chrono::steady_clock::now();
        const BatchLoss loss = device.step(batch, micro, 1.0, 1.0, &norm, 1);
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
        if (s == o.steps + o.warmup - 1) {
          cudaDeviceSynchronize();
          cudaProfilerStop();
        }
        std::printf("step %d: %.1f ms, loss %.5f, grad norm %.4f%s [loss %a, norm %a]\n", s, t, loss.loss, norm,
                    s < o.warmup ? " (warm-up)" : "", loss.loss, norm);
        if (s >= o.warmup) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const double tokens = static_cast<double>(o.rows * o.seq);
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      const CudaAllocatorStats st = allocator.stats();
      std::printf("distill_step dp=%s shape=%s plan=%s recompute=%s loss=%s dw=%s gate_up=%s norm16=%s autotune=%s overlap=%s normdx=%s dh=%s normbwd=%s precision=%s rows=%lld micro=%lld "
                  "seq=%lld layers=%d: %.1f ms/step, "
                  "%.0f tok/s, allocator peak %.2f GiB in use over the plan (steps alone %.2f GiB; %.2f GiB "
                  "reserved), device used %.2f GiB; allocator: %llu cudaMalloc, %llu out-of-memory retries\n",
                  dp.c_str(), o.shape.c_str(), plan.name, recompute_name(recompute),
                  chunking ? lm_head_chunking_text(*chunking).c_str() : "default", dw.name, gate_up->name, norm16->name, autotune->name, overlap->name, norm_dx->name, dh->name, norm_bwd->name,
                  o.precision.c_str(),
                  static_cast<long long>(o.rows),
                  static_cast<long long>(micro), static_cast<long long>(o.seq), layers, med,
                  tokens / (med / 1000.0), gib(std::max(attach_peak, st.peak_bytes_in_use)), gib(st.peak_bytes_in_use),
                  gib(st.peak_bytes_reserved), gib(total_b - free_b),
                  static_cast<unsigned long long>(st.num_device_mallocs),
                  static_cast<unsigned long long>(st.num_oom_retries));
      std::fflush(stdout);
    }
  }
  return 0;
}
