// The training loop of pretrain and distill (contracts in trainer.h): setup and checks, steps, validation,
// checkpoints, and the final test evaluation and model.
#include "train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/data_stream.h"
#include "dist/communicator.h"
#include "models/model_train.h"
#include "models/safetensors.h"
#include "models/tensor_table.h"
#include "train/adamw.h"
#include "train/checkpoint_io.h"
#include "train/data_parallel.h"
#include "train/eval.h"
#include "train/fault_inject.h"
#include "train/grad_utils.h"
#include "train/lr_schedule.h"
#include "train/memory_plan.h"
#include "train/train_device.h"
#include "train/trainer_batch.h"
#include "train/trainer_log.h"
#include "train/trainer_options.h"

namespace hlm {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Whether two paths name the same existing directory (false when either does not exist).
bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

constexpr const char* kLockFile = ".hybridlm.lock";

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// The flock of `dir`/.hybridlm.lock, held while this process trains into `dir` (released when the process ends, even
// by SIGKILL). held_elsewhere() only probes: it creates nothing.
class RunLock {
 public:
  RunLock() = default;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  static bool held_elsewhere(const fs::path& dir) {
    const int fd = ::open((dir / kLockFile).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return held;
  }
  void acquire(const fs::path& dir, const std::string& option_value) {
    const fs::path path = dir / kLockFile;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    HLM_CHECK_INPUT(fd_ >= 0, path.string(), ": cannot create the lock file: ", std::strerror(errno));
    HLM_CHECK_INPUT(::flock(fd_, LOCK_EX | LOCK_NB) == 0, "--out ", option_value,
                    ": another hybridlm process is training into this directory (it holds ", path.string(),
                    "); wait for it to end or use another --out");
  }

 private:
  int fd_ = -1;
};

// Whether `dir` holds nothing but a lock file left by an earlier process.
bool empty_but_lock(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != kLockFile) return false;
  return true;
}

// The nearest existing directory at or above `path` (where --out will be created).
fs::path nearest_existing(fs::path path) {
  std::error_code ec;
  while (!fs::exists(path, ec) && path.has_parent_path() && path.parent_path() != path) path = path.parent_path();
  return path;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const TensorSpec& spec : expected_tensors(config)) n += spec.shape.numel();
  return n;
}

void warn_unknown_keys(const ModelConfig& c, const std::string& what) {
  for (const std::string& key : c.unknown_keys)
    std::fprintf(stderr, "hybridlm: warning: %s: config key '%s' is not used by hybridlm\n", what.c_str(),
                 key.c_str());
}

class Trainer {
 public:
  Trainer(const TrainConfig& config, const TrainHooks& hooks, TrainDevice* device, Communicator* comm);
  TrainResult run();

 private:
  bool writer() const { return comm_->rank() == 0; }  // the rank that checks --out and writes every file
  void record(const json& j) {
    if (metrics_) metrics_->write(j);
  }
  void check_out_dir() const;
  void check_disk_and_device() const;
  void choose_memory_plan();
  void build_optimizer();
  void prepare_out();
  bool step_once();
  BatchLoss batch_step(const PackedBatch& batch, int64_t s, double* norm, bool* finite);
  EvalResult evaluate_set(const HeldOutSet& set);
  void validate_now();
  void checkpoint_now();
  void finish();

  TrainConfig cfg_;
  TrainHooks hooks_;
  TrainDevice* device_ = nullptr;  // null: steps on the CPU
  SingleCommunicator single_;
  Communicator* comm_ = &single_;     // data parallel over comm_->size() ranks (train/data_parallel.h)
  std::unique_ptr<DataParallel> dp_;  // only with several ranks on the CPU
  bool device_dp_ = false;            // the device trains data parallel (TrainDevice::set_data_parallel)
  TrainPlan plan_;
  fs::path out_;
  Corpus corpus_;
  std::unique_ptr<Tokenizer> tokenizer_;
  DataConfig data_;
  std::optional<CheckpointInfo> resume_;
  std::optional<Model> student_, teacher_;
  DecoderWeights grads_;
  std::unique_ptr<AdamW> optimizer_;
  MemoryPlanChoice memory_plan_;  // chosen before the optimizer is built (train/memory_plan.h)
  LrSchedule schedule_;
  std::unique_ptr<TrainStream> stream_;
  HeldOutSet valid_, test_;
  RunLock lock_;
  TrainerState state_;
  std::unique_ptr<MetricsLog> metrics_;
  TrainResult result_;
  int64_t last_valid_step_ = -1, last_checkpoint_step_ = -1, steps_this_run_ = 0;
  bool checkpoint_pending_ = false;
  Clock::time_point start_ = Clock::now();
  double elapsed_before_ = 0.0, step_seconds_ = 0.0;
};

Trainer::Trainer(const TrainConfig& config, const TrainHooks& hooks, TrainDevice* device, Communicator* comm)
    : cfg_(config), hooks_(hooks), device_(device) {
  if (comm != nullptr) comm_ = comm;
  cfg_.world_size = comm_->size();
  train_config_validate(cfg_);
  HLM_CHECK_INPUT(cfg_.device == "cpu" || device_ != nullptr, "--device ", cfg_.device,
                  ": this hybridlm was built without CUDA (configure with -DHYBRIDLM_CUDA=ON)");
  if (cfg_.device == "cpu") device_ = nullptr;
  const int64_t W = comm_->size();
  // The device trains data parallel on several ranks, or on one when HYBRIDLM_GPU_COLLECTIVES asks (train_device.h).
  device_dp_ = device_ != nullptr && (W > 1 || std::getenv(kGpuCollectivesEnv) != nullptr);
  HLM_CHECK_INPUT(cfg_.zero_stage == 0 || cfg_.zero_stage == 1, "--zero-stage ", cfg_.zero_stage,
                  ": must be 0 (replicated AdamW state) or 1 (sharded)");
  HLM_CHECK_INPUT(cfg_.batch_rows % (W * cfg_.micro_batch_rows) == 0, "--batch ", cfg_.batch_rows,
                  " must split into ", W, " ranks x whole micro-batches of --micro-batch ", cfg_.micro_batch_rows,
                  " rows (a multiple of ", W * cfg_.micro_batch_rows, ")");
  HLM_CHECK(device_ == nullptr || (!hooks_.on_step_begin && !hooks_.on_gradients),
            "train_run: test hooks see host state and are for CPU runs only");
  plan_ = train_plan(cfg_);
  out_ = fs::absolute(cfg_.out).lexically_normal();
  HLM_CHECK_INPUT(!out_.filename().empty(), cfg_.out, ": not a usable output directory name");
  if (!cfg_.resume.empty()) {
    resume_ = checkpoint_read(checkpoint_find(cfg_.resume));
    const TrainConfig saved = train_config_from_json(resume_->train_config, resume_->dir.string());
    HLM_CHECK_INPUT(saved.world_size == cfg_.world_size, "--resume ", resume_->dir.string(),
                    ": the checkpoint was written by a run of ", saved.world_size, " rank(s), this run has ",
                    cfg_.world_size, "; resume with the same number of ranks (mpirun -np / srun -n ",
                    saved.world_size, "): the per-rank batch shares and the order of the gradient sums depend on it");
    const std::vector<std::string> diff = train_config_fixed_differences(saved, cfg_);
    std::string list;
    for (const std::string& d : diff) list += "\n  " + d;
    HLM_CHECK_INPUT(diff.empty(), "--resume ", resume_->dir.string(),
                    ": settings that decide the trajectory differ from the checkpoint's:", list);
    HLM_CHECK_INPUT(resume_->state.total_steps == plan_.total_steps, resume_->dir.string(), ": checkpoint plans ",
                    resume_->state.total_steps, " steps, this configuration ", plan_.total_steps);
    HLM_CHECK_INPUT(cfg_.stop_after_steps == 0 || cfg_.stop_after_steps > resume_->state.step,
                    "--stop-after-steps ", cfg_.stop_after_steps, " is not after the checkpoint's step ",
                    resume_->state.step);
  }
  if (writer()) check_out_dir();
  HLM_CHECK_INPUT(fs::is_directory(cfg_.data), cfg_.data, ": not a corpus directory (does not exist)");
  corpus_ = Corpus::open(cfg_.data);
  tokenizer_ = tokenizer_load(cfg_.tokenizer);

  if (resume_) {
    checkpoint_verify(resume_->dir);  // a truncated or damaged file is an input error naming it
    student_.emplace(model_load_trainable(resume_->dir));
  } else if (cfg_.job == TrainJob::Pretrain) {
    const ModelConfig mc = load_model_config(cfg_.model_config);
    warn_unknown_keys(mc, cfg_.model_config);
    student_.emplace(Model::create(mc, cfg_.init_seed));
    if (hooks_.init_student) hooks_.init_student(*student_);
  } else {
    check_model_dir(cfg_.student);
    student_.emplace(model_load_trainable(cfg_.student));
  }
  const int64_t V = student_->config().vocab_size;
  HLM_CHECK_INPUT(tokenizer_->vocab_size() <= V, "tokenizer ", tokenizer_->name(), " has ",
                  tokenizer_->vocab_size(), " tokens but the model's vocabulary is ", V);
  if (cfg_.job == TrainJob::Distill) {
    check_model_dir(cfg_.teacher);
    teacher_.emplace(Model::load(cfg_.teacher));
    HLM_CHECK_INPUT(teacher_->config().vocab_size == V, "--teacher ", cfg_.teacher, ": its vocabulary (",
                    teacher_->config().vocab_size, ") differs from the student's (", V, ", ",
                    resume_ ? resume_->dir.string() : cfg_.student, ")");
  }

  data_.seq_len = cfg_.seq_len;
  data_.held_out_docs = cfg_.held_out_docs;
  data_.anchor_share = cfg_.anchor_share;
  data_.token_budget = cfg_.tokens;
  data_.data_seed = cfg_.data_seed;
  data_.eval_tokens_per_language = cfg_.eval_tokens;
  data_.packing = data_packing_from_name(cfg_.packing, "--packing");
  data_.passes = cfg_.passes;
  stream_ = std::make_unique<TrainStream>(corpus_, *tokenizer_, data_);
  valid_ = held_out_set(corpus_, *tokenizer_, data_, Split::Valid);
  test_ = held_out_set(corpus_, *tokenizer_, data_, Split::Test);
  if (hooks_.batch_targets)
    for (HeldOutSet* set : {&valid_, &test_})
      for (PackedBatch& b : set->per_language) hooks_.batch_targets(b);
  held_out_check(valid_, Split::Valid, data_);
  held_out_check(test_, Split::Test, data_);
  choose_memory_plan();
  // Which plans run on several ranks (and with which --zero-stage) is memory_plan_unusable's rule, applied above.
  build_optimizer();
  if (device_dp_)  // before attach (run()); the device creates its collectives here, on every rank
    device_->set_data_parallel(*comm_, static_cast<int>(cfg_.zero_stage), bucket_elements_from_env(kGpuBucketElements));
  else if (W > 1)
    dp_ = std::make_unique<DataParallel>(*comm_, *optimizer_, static_cast<int>(cfg_.zero_stage),
                                         bucket_elements_from_env());

  schedule_ = {plan_.total_steps, plan_.warmup_steps, cfg_.start_factor, cfg_.min_lr};
  state_.total_steps = plan_.total_steps;
  state_.warmup_steps = plan_.warmup_steps;
  state_.data_seed = cfg_.data_seed;
  state_.init_seed = cfg_.init_seed;
  if (resume_) {
    state_ = resume_->state;
    HLM_CHECK_INPUT(state_.data_seed == cfg_.data_seed && state_.init_seed == cfg_.init_seed,
                    resume_->dir.string(), ": seeds differ from the configuration's");
    stream_->restore(stream_cursor_from_json(state_.cursor));
    if (dp_) dp_->restore_optimizer(resume_->dir, *optimizer_);
    else checkpoint_restore_optimizer(resume_->dir, *optimizer_);
    elapsed_before_ = state_.elapsed_seconds;
    if (same_directory(resume_->dir.parent_path(), out_)) {
      result_.last_checkpoint = resume_->dir;
      last_checkpoint_step_ = state_.step;
    }
  }
  if (writer()) check_disk_and_device();
}

// Fresh run: --out absent or empty. Resume: also the checkpoint's own run directory, when the checkpoint is its
// newest and the run has not finished (no model/).
void Trainer::check_out_dir() const {
  if (!fs::exists(out_)) {
    const fs::path parent = nearest_existing(out_);
    HLM_CHECK_INPUT(fs::is_directory(parent), "--out ", cfg_.out, ": ", parent.string(), " is not a directory");
    HLM_CHECK_INPUT(::access(parent.c_str(), W_OK | X_OK) == 0, "--out ", cfg_.out, ": cannot create it in ",
                    parent.string(), " (", std::strerror(errno), ")");
    return;
  }
  HLM_CHECK_INPUT(fs::is_directory(out_), cfg_.out, ": --out exists and is not a directory");
  HLM_CHECK_INPUT(!RunLock::held_elsewhere(out_), "--out ", cfg_.out,
                  ": another hybridlm process is training into this directory (it holds ", (out_ / kLockFile).string(),
                  "); wait for it to end or use another --out");
  HLM_CHECK_INPUT(::access(out_.c_str(), W_OK | X_OK) == 0, "--out ", cfg_.out, ": not writable (",
                  std::strerror(errno), ")");
  if (empty_but_lock(out_)) return;
  const bool own_run = resume_ && same_directory(resume_->dir.parent_path(), out_);
  HLM_CHECK_INPUT(own_run, cfg_.out, ": --out exists and is not empty (use a new directory",
                  resume_ ? ", or the checkpoint's own run directory)" : ")");
  const std::vector<fs::path> all = checkpoint_list(out_);
  HLM_CHECK_INPUT(all.empty() || same_directory(all.back(), resume_->dir), cfg_.out, ": holds a newer checkpoint (",
                  all.empty() ? "" : all.back().filename().string(),
                  ") than the one to resume; resume from it or use another --out");
  // model/ without test.json: trained to the end (its final checkpoint, written before model/, is the newest one),
  // the final evaluation did not finish; resuming redoes only that.
  HLM_CHECK_INPUT(!fs::exists(out_ / "test.json"), cfg_.out,
                  ": the run has finished (test.json exists); use another --out");
}

// Free space for the files still to come, and the device's free memory against the plan's floor.
void Trainer::check_disk_and_device() const {
  int64_t parameters = 0;
  for (const AdamWParam& p : optimizer_->params()) parameters += p.param.numel();
  const int64_t steps_left = plan_.total_steps - state_.step;
  const bool periodic = cfg_.checkpoint_every_steps > 0 && cfg_.checkpoint_every_steps < steps_left;
  const TrainDiskPlan disk = train_disk_plan(parameters, periodic || cfg_.stop_after_steps > 0);
  uint64_t needed = disk.peak_bytes;
  if (resume_ && same_directory(resume_->dir.parent_path(), out_)) {
    needed = fs::exists(out_ / "model") ? 0 : needed - std::min(needed, disk.checkpoint_bytes);  // already on disk
  }
  const fs::path where = nearest_existing(out_);
  uint64_t free_bytes = 0;
  if (hooks_.free_bytes) {
    free_bytes = hooks_.free_bytes(where);
  } else {
    struct statvfs st{};
    HLM_CHECK_INPUT(::statvfs(where.c_str(), &st) == 0, "--out ", cfg_.out, ": cannot query the free space of ",
                    where.string(), " (", std::strerror(errno), ")");
    free_bytes = static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
  }
  HLM_CHECK_INPUT(free_bytes >= needed, "--out ", cfg_.out, ": the file system of ", where.string(), " has ",
                  str_cat(gib(free_bytes)), " GiB free, the run needs about ", gib(needed), " GiB (",
                  disk.peak_bytes > disk.checkpoint_bytes + disk.model_bytes ? "two checkpoints" : "one checkpoint",
                  " of ", gib(disk.checkpoint_bytes), " GiB and the final model of ", gib(disk.model_bytes),
                  " GiB); free some space or choose another --out");
  if (device_ == nullptr) return;
  const uint64_t device_free = device_->free_memory_bytes();
  if (device_free == 0) return;  // unknown
  // The plan's estimate against the free memory (auto already chose a plan that fits; a named one is checked here).
  const uint64_t need = memory_plan_.estimate.total();
  HLM_CHECK_INPUT(need <= device_free, "--device ", cfg_.device, " --memory-plan ", memory_plan_.plan->name,
                  ": the run needs about ", gib(need), " GiB of device memory, the device has ", gib(device_free),
                  " GiB free; use --memory-plan auto, a smaller model, --micro-batch or --seq-len");
}

// The memory plan (train/memory_plan.h): named by --memory-plan, or the first that fits the device's free memory.
void Trainer::choose_memory_plan() {
  MemoryPlanInputs in;
  in.student = student_->config();
  in.teacher = teacher_ ? &teacher_->config() : nullptr;
  in.bf16 = cfg_.precision == "bf16";
  in.micro_batch_tokens = cfg_.micro_batch_rows * cfg_.seq_len;
  // Rows, a lower bound of the documents a packed micro-batch holds (each further one adds one chunk of the GDN
  // layers' kept per-chunk states under --recompute none: ~1.3 MiB per layer at 32 heads of 128).
  in.micro_batch_sequences = cfg_.micro_batch_rows;
  in.recompute = recompute_from_name(cfg_.recompute);
  in.ranks = comm_->size();  // the estimate is per rank (the shards of ZeRO-1)
  in.zero_stage = static_cast<int>(cfg_.zero_stage);
  in.gpu = device_ != nullptr;
  in.shard_masters = device_ == nullptr || zero1_masters_sharded_from_env();
  const uint64_t free_bytes = device_ != nullptr ? device_->free_memory_bytes() : 0;
  memory_plan_ = memory_plan_choose(cfg_.memory_plan, in, device_ != nullptr, free_bytes);
  HLM_CHECK_INPUT(memory_plan_.plan != nullptr, "--device ", cfg_.device, ": the run needs at least ",
                  gib(memory_plan_.least_bytes), " GiB of device memory (the leanest memory plan's estimate for ",
                  parameter_count(in.student), " student parameters",
                  teacher_ ? " and the teacher" : "", ", a micro-batch of --micro-batch ", cfg_.micro_batch_rows,
                  " x --seq-len ", cfg_.seq_len, " tokens), the device has ", gib(free_bytes), " GiB free: ",
                  memory_plan_.reason, "\nuse a smaller model, --micro-batch or --seq-len");
  if (device_ != nullptr) device_->set_memory_plan(*memory_plan_.plan);
}

void Trainer::build_optimizer() {
  // On a device the gradients live there (batch_step hands the whole step to it) and the host AdamW's gradient slots
  // are never read: shapes only, so a GPU run's host memory holds no second copy of the student (20.5 GB for a
  // Qwen3-4B-shaped one).
  grads_ = device_ != nullptr ? unfilled_weights_like(student_->config()) : zero_grads_like(student_->config());
  std::vector<AdamWGroup> groups;
  std::vector<AdamWParam> params;
  for (const NamedParameter& p : named_parameters(student_->config(), student_->mutable_weights(), grads_)) {
    const bool rec = p.name.find(".linear_attn.") != std::string::npos;
    const bool decay = default_weight_decay(p.name);
    const std::string name = std::string(rec ? "rec" : "rest") + (decay ? "" : "_no_decay");
    int index = 0;
    while (index < static_cast<int>(groups.size()) && groups[static_cast<size_t>(index)].name != name) ++index;
    if (index == static_cast<int>(groups.size()))
      groups.push_back({name, rec ? cfg_.lr_rec : cfg_.lr_rest, decay ? cfg_.weight_decay : 0.0, 0.0});
    params.push_back({p.name, p.value, p.grad, index});
  }
  AdamWConfig ac{cfg_.beta1, cfg_.beta2, cfg_.adam_eps};
  ac.state = memory_plan_.plan->state;
  ac.master = memory_plan_.plan->master;
  ac.sr_seed = splitmix64(cfg_.init_seed) ^ cfg_.data_seed;  // the run's seeds: a resume draws the same bits
  // ZeRO-1 on the CPU (several ranks, --zero-stage 1): the moments live in DataParallel's shard optimizer only. A
  // device shards its own copy; the host AdamW keeps the whole state for checkpoints (host memory, gathered by
  // sync_to_host).
  const bool sharded = comm_->size() > 1 && cfg_.zero_stage == 1 && device_ == nullptr;
  optimizer_ = std::make_unique<AdamW>(std::move(groups), std::move(params), ac, !sharded);
}

void Trainer::prepare_out() {
  fs::create_directories(out_);
  lock_.acquire(out_, cfg_.out);
  for (const auto& entry : fs::directory_iterator(out_)) {  // leftovers of an interrupted checkpoint or model write
    const std::string name = entry.path().filename().string();
    if (name.rfind(std::string(".") + kCheckpointPrefix, 0) == 0 || name.rfind(".model.", 0) == 0)
      fs::remove_all(entry.path());
  }
  file_write_atomic(out_ / "config.json", train_config_to_json(cfg_).dump(2) + "\n");
  std::string metrics;
  if (resume_ && fs::exists(resume_->dir / kMetricsFile)) {
    std::ifstream in(resume_->dir / kMetricsFile, std::ios::binary);
    metrics.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  file_write_atomic(out_ / kMetricsFile, metrics);
  metrics_ = std::make_unique<MetricsLog>(out_ / kMetricsFile);
}

TrainResult Trainer::run() {
  if (writer()) prepare_out();
  int64_t rec = 0, rest = 0;
  for (const AdamWParam& p : optimizer_->params())
    (p.name.find(".linear_attn.") != std::string::npos ? rec : rest) += p.param.numel();
  std::printf("parameters   %lld (rec %lld, rest %lld); %s at step %lld of %lld\n",
              static_cast<long long>(rec + rest), static_cast<long long>(rec), static_cast<long long>(rest),
              resume_ ? "resuming" : "starting", static_cast<long long>(state_.step),
              static_cast<long long>(plan_.total_steps));
  std::printf("%s\n", memory_plan_describe(memory_plan_).c_str());
  if (device_ != nullptr) {
    std::printf("%-12s %s\n", "accelerator", device_->describe().c_str());
    device_->attach(*student_, teacher_ ? &*teacher_ : nullptr, *optimizer_);
  }
  std::fflush(stdout);
  if (!resume_) validate_now();
  while (state_.step < plan_.total_steps) {
    if (!step_once()) break;
    // The last step's validation comes in finish(), after the final model is written.
    if (cfg_.eval_every_tokens > 0 && state_.step < plan_.total_steps &&
        state_.tokens_seen / cfg_.eval_every_tokens >
            (state_.tokens_seen - plan_.tokens_per_step) / cfg_.eval_every_tokens)
      validate_now();
    const bool due = cfg_.checkpoint_every_steps > 0 && state_.step % cfg_.checkpoint_every_steps == 0;
    if ((due || checkpoint_pending_) && state_.consecutive_bad == 0) checkpoint_now();
    else if (due) checkpoint_pending_ = true;
    if (cfg_.stop_after_steps > 0 && state_.step >= cfg_.stop_after_steps && state_.step < plan_.total_steps) {
      if (last_checkpoint_step_ != state_.step && state_.consecutive_bad == 0) checkpoint_now();
      result_.status = TrainStatus::Stopped;
      result_.message = str_cat("after step ", state_.step, " as asked (--stop-after-steps); ",
                                result_.last_checkpoint.empty()
                                    ? std::string("no checkpoint was written (the step was not finite)")
                                    : "resume with --resume " + result_.last_checkpoint.string());
      break;
    }
  }
  result_.step = state_.step;
  result_.tokens_seen = state_.tokens_seen;
  result_.passes_used = stream_->pass() + 1;
  if (result_.status == TrainStatus::Completed || result_.status == TrainStatus::DataExhausted) finish();
  const char* status = result_.status == TrainStatus::Completed          ? "completed"
                       : result_.status == TrainStatus::Stopped          ? "stopped"
                       : result_.status == TrainStatus::DataExhausted    ? "data_exhausted"
                       : result_.status == TrainStatus::EvaluationFailed ? "evaluation_failed"
                                                                         : "diverged";
  record({{"type", "end"},
                   {"step", state_.step},
                   {"tokens", state_.tokens_seen},
                   {"passes_used", stream_->pass() + 1},
                   {"passes", cfg_.passes},
                   {"status", status},
                   {"message", result_.message}});
  return result_;
}

bool Trainer::step_once() {
  const int64_t s = state_.step + 1;
  const Clock::time_point t0 = Clock::now();
  const int64_t pass_before = stream_->pass();
  PackedBatch batch = stream_->next(cfg_.batch_rows);
  if (hooks_.batch_targets) hooks_.batch_targets(batch);
  for (int64_t p = pass_before + 1; p <= stream_->pass(); ++p) {  // 1-based pass p + 1 begins in this step's rows
    record({{"type", "pass"}, {"pass", p + 1}, {"passes", cfg_.passes}, {"step", s},
            {"tokens", state_.tokens_seen}});
    if (writer())
      std::fprintf(stderr, "data: pass %lld of %lld starts at step %lld (after %lld training tokens)\n",
                   static_cast<long long>(p + 1), static_cast<long long>(cfg_.passes), static_cast<long long>(s),
                   static_cast<long long>(state_.tokens_seen));
  }
  if (batch.rows < cfg_.batch_rows) {
    result_.status = TrainStatus::DataExhausted;
    result_.message = str_cat("the training data ran out after step ", state_.step, " of ", plan_.total_steps,
                              " (", state_.tokens_seen, " of ", cfg_.tokens, " tokens, ", stream_->pass() + 1,
                              " of --passes ", cfg_.passes, "); finished there");
    return false;
  }
  double norm = 0.0;
  bool finite = false;
  const BatchLoss loss = batch_step(batch, s, &norm, &finite);
  fault_point("train.step");
  if (finite) {
    state_.consecutive_bad = 0;
  } else {
    ++state_.consecutive_bad;
    state_.skipped_steps.push_back(s);
    result_.skipped_steps.push_back(s);
  }
  state_.step = s;
  state_.tokens_seen += plan_.tokens_per_step;
  {
    std::vector<int64_t> count(corpus_.languages().size(), 0);
    for (const int16_t l : batch.language) ++count[static_cast<size_t>(l)];
    for (size_t l = 0; l < count.size(); ++l)
      if (count[l] > 0) state_.tokens_by_language[corpus_.languages()[l].code] += count[l];
  }
  result_.losses.push_back(loss.loss);
  const double dt = seconds_since(t0);
  step_seconds_ += dt;
  ++steps_this_run_;

  const double lr_rec = lr_schedule_at(schedule_, cfg_.lr_rec, s), lr_rest = lr_schedule_at(schedule_, cfg_.lr_rest, s);
  json by_language = json::object();
  for (size_t i = 0; i < loss.count_by_language.size(); ++i)
    if (loss.count_by_language[i] > 0)
      by_language[corpus_.languages()[i].code] =
          loss.sum_by_language[i] / static_cast<double>(loss.count_by_language[i]);
  const double tok_per_s = static_cast<double>(plan_.tokens_per_step) / std::max(dt, 1e-9);
  record({{"type", "step"},
                   {"step", s},
                   {"tokens", state_.tokens_seen},
                   {"loss", std::isfinite(loss.loss) ? json(loss.loss) : json(nullptr)},
                   {"grad_norm", std::isfinite(norm) ? json(norm) : json(nullptr)},
                   {"lr", {{"rec", lr_rec}, {"rest", lr_rest}}},
                   {"skipped", !finite},
                   {"by_language", by_language},
                   {"tokens_per_second", tok_per_s},
                   {"activation_bytes", loss.kept_bytes},
                   {"elapsed_seconds", elapsed_before_ + seconds_since(start_)}});
  if (!finite) {
    std::fprintf(stderr, "step %lld: non-finite %s (loss %g, grad norm %g): update skipped (%lld in a row)\n",
                 static_cast<long long>(s), std::isfinite(loss.loss) ? "gradient" : "loss", loss.loss, norm,
                 static_cast<long long>(state_.consecutive_bad));
  } else if (writer() && (s % cfg_.log_every_steps == 0 || s == plan_.total_steps)) {
    const double per_step = step_seconds_ / static_cast<double>(steps_this_run_);
    const ProgressFields f{s, plan_.total_steps, state_.tokens_seen, loss.loss, norm, lr_rec, lr_rest,
                           static_cast<double>(plan_.tokens_per_step) / std::max(per_step, 1e-9),
                           per_step * static_cast<double>(plan_.total_steps - s), cfg_.job == TrainJob::Distill};
    std::fprintf(stderr, "%s\n", progress_line(f).c_str());
  }
  if (state_.consecutive_bad >= cfg_.max_bad_steps) {
    std::string steps;
    for (size_t i = state_.skipped_steps.size() - static_cast<size_t>(state_.consecutive_bad);
         i < state_.skipped_steps.size(); ++i)
      steps += (steps.empty() ? "" : ", ") + std::to_string(state_.skipped_steps[i]);
    result_.status = TrainStatus::Diverged;
    result_.message = str_cat(
        "training stopped at step ", s, ": ", state_.consecutive_bad, " steps in a row had a non-finite loss or ",
        "gradient norm (steps ", steps, "; their updates were skipped). ",
        result_.last_checkpoint.empty() ? std::string("No checkpoint was written.")
                                        : "The last good checkpoint is " + result_.last_checkpoint.string() + ".");
    return false;
  }
  return true;
}

// Gradient, clipping, schedule and (when loss and norm are finite) the AdamW update of step s, on the CPU or device.
BatchLoss Trainer::batch_step(const PackedBatch& batch, int64_t s, double* norm, bool* finite) {
  if (device_ != nullptr) {
    lr_schedule_apply(*optimizer_, schedule_, s);  // the device reads each group's current lr
    const BatchLoss loss =
        device_->step(batch, cfg_.micro_batch_rows, cfg_.tau, cfg_.clip, norm, corpus_.languages().size());
    *finite = std::isfinite(loss.loss) && std::isfinite(*norm);
    return loss;
  }
  if (hooks_.on_step_begin) hooks_.on_step_begin(s, *student_);
  const std::vector<Tensor> grads = optimizer_->grads();
  grad_zero(grads);
  if (dp_) {  // this rank's rows, weighted as part of the whole batch; sums over ranks (train/data_parallel.h)
    const auto [first, last] = dp_->rows(batch.rows);
    const int64_t counted =
        teacher_ ? batch.batch.total_tokens()
                 : std::count_if(batch.targets.begin(), batch.targets.end(), [](int32_t t) { return t >= 0; });
    BatchLoss loss = train_batch_gradient(*student_, teacher_ ? &*teacher_ : nullptr,
                                          packed_batch_rows(batch, first, last), cfg_.micro_batch_rows, cfg_.tau,
                                          grads_, corpus_.languages().size(), recompute_from_name(cfg_.recompute),
                                          counted);
    if (hooks_.on_gradients) hooks_.on_gradients(s, grads);
    dp_->reduce_loss(loss);
    *norm = dp_->reduce_and_clip(cfg_.clip);
    *finite = std::isfinite(loss.loss) && std::isfinite(*norm);
    lr_schedule_apply(*optimizer_, schedule_, s);
    if (*finite) dp_->step(*optimizer_);
    return loss;
  }
  const BatchLoss loss = train_batch_gradient(*student_, teacher_ ? &*teacher_ : nullptr, batch,
                                              cfg_.micro_batch_rows, cfg_.tau, grads_, corpus_.languages().size(),
                                              recompute_from_name(cfg_.recompute));
  if (hooks_.on_gradients) hooks_.on_gradients(s, grads);
  *norm = clip_grad_norm(grads, cfg_.clip);
  *finite = std::isfinite(loss.loss) && std::isfinite(*norm);
  lr_schedule_apply(*optimizer_, schedule_, s);
  if (*finite) optimizer_->step();
  return loss;
}

// Validation and test: on the device with its current weights when there is one (no sync needed), else on the CPU;
// passes of micro_batch_rows rows either way.
EvalResult Trainer::evaluate_set(const HeldOutSet& set) {
  if (device_ != nullptr)
    return evaluate_with([this](const PackedBatch& batch, EvalSums& sums) { device_->evaluate_pass(batch, sums); },
                         teacher_.has_value(), set, cfg_.micro_batch_rows);
  return evaluate(*student_, teacher_ ? &*teacher_ : nullptr, set, cfg_.micro_batch_rows);
}

void Trainer::validate_now() {
  if (!writer()) {  // rank 0 evaluates; the others go on to the next step's collectives and wait there
    last_valid_step_ = state_.step;
    return;
  }
  const Clock::time_point t0 = Clock::now();
  const EvalResult r = evaluate_set(valid_);
  record(metrics_valid_record(state_.step, state_.tokens_seen, r));
  last_valid_step_ = state_.step;
  std::fprintf(stderr, "valid step %lld: ce %.5f%s (%.1fs)\n", static_cast<long long>(state_.step), r.mean_ce,
               r.mean_kl ? str_cat(", kl ", *r.mean_kl, ", ce gap ", *r.mean_ce_gap).c_str() : "",
               seconds_since(t0));
}

void Trainer::checkpoint_now() {
  if (device_ != nullptr) device_->sync_to_host();
  state_.cursor = stream_cursor_to_json(stream_->cursor());
  state_.lr.clear();
  for (const AdamWGroup& g : optimizer_->groups()) state_.lr[g.name] = g.lr;
  state_.elapsed_seconds = elapsed_before_ + seconds_since(start_);
  const AdamW* optimizer = dp_ ? dp_->optimizer_for_checkpoint(*optimizer_) : optimizer_.get();  // every rank
  if (!writer()) {
    last_checkpoint_step_ = state_.step;
    checkpoint_pending_ = false;
    return;
  }
  try {
    result_.last_checkpoint =
        checkpoint_save(out_, *student_, *optimizer, state_, train_config_to_json(cfg_), metrics_->path());
  } catch (Error& e) {  // a full disk or an I/O error: the previous checkpoint is untouched (checkpoint_io.h)
    e.add_context("writing ", checkpoint_dir_name(state_.step), " failed (",
                  result_.last_checkpoint.empty() ? std::string("no earlier checkpoint exists")
                                                  : result_.last_checkpoint.string() + " is intact: resume from it",
                  ")");
    throw;
  }
  last_checkpoint_step_ = state_.step;
  checkpoint_pending_ = false;
  record({{"type", "checkpoint"},
                   {"step", state_.step},
                   {"tokens", state_.tokens_seen},
                   {"path", result_.last_checkpoint.filename().string()}});
}

// The final checkpoint and model/ first (a failed evaluation must not lose the run), then validation and test.
void Trainer::finish() {
  if (last_checkpoint_step_ != state_.step) {
    checkpoint_now();  // syncs a device's weights to the host first
  } else if (device_ != nullptr) {
    device_->sync_to_host();
  }
  if (!writer()) return;
  const fs::path model_dir = out_ / "model";
  if (!fs::exists(model_dir))  // present only when resuming a run whose final evaluation did not finish
    directory_write_atomic(model_dir, [&](const fs::path& tmp) { student_->save(tmp); });
  fault_point("model.saved");
  try {
    if (hooks_.on_final_evaluation) hooks_.on_final_evaluation();
    fault_point("train.final_evaluation");
    if (last_valid_step_ != state_.step) validate_now();
    EvalResult r = evaluate_set(test_);
    for (LanguageEval& l : r.languages) l.tier = corpus_.language(l.code).tier;
    const json meta = {{"split", "test"},
                       {"job", train_job_name(cfg_.job)},
                       {"model", model_dir.string()},
                       {"teacher", cfg_.job == TrainJob::Distill ? json(cfg_.teacher) : json(nullptr)},
                       {"data", cfg_.data},
                       {"device", cfg_.device},
                       {"seq_len", cfg_.seq_len},
                       {"step", state_.step},
                       {"tokens_trained", state_.tokens_seen},
                       {"tokens_by_language", state_.tokens_by_language},
                       {"passes", cfg_.passes},
                       {"passes_used", stream_->pass() + 1},
                       {"data_exhausted", result_.status == TrainStatus::DataExhausted}};
    file_write_atomic(out_ / "test.json", eval_result_to_json(r, meta).dump(2) + "\n");
    result_.test = std::move(r);
  } catch (const std::exception& e) {
    result_.status = TrainStatus::EvaluationFailed;
    std::string eval_cmd = "hybridlm eval --model " + model_dir.string();
    if (cfg_.job == TrainJob::Distill) eval_cmd += " --teacher " + cfg_.teacher;
    eval_cmd += str_cat(" --data ", cfg_.data, " --tokenizer ", cfg_.tokenizer, " --split test --seq-len ",
                        cfg_.seq_len, " --held-out-docs ", cfg_.held_out_docs, " --eval-tokens ", cfg_.eval_tokens,
                        " --rows ", cfg_.micro_batch_rows, " --out ", (out_ / "test.json").string());
    result_.message = str_cat("training finished (step ", state_.step, " of ", plan_.total_steps,
                              ") and the final model is written to ", model_dir.string(), " (checkpoint ",
                              result_.last_checkpoint.string(), "), but the final evaluation failed: ", e.what(),
                              "\nEvaluate the model later with\n  ", eval_cmd,
                              "\nor redo the final evaluation with\n  hybridlm ", train_job_name(cfg_.job),
                              " --resume ", out_.string(), " --out ", out_.string());
  }
}

}  // namespace

TrainResult train_run(const TrainConfig& config, const TrainHooks& hooks, TrainDevice* device, Communicator* comm) {
  Trainer trainer(config, hooks, device, comm);
  return trainer.run();
}

}  // namespace hlm
