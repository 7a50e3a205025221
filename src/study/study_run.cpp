// The study's stages (study_run.h). Progress: one "study [stage] ..." line per stage on stdout; the trainer's step
// lines and the analysis progress go to stderr.
#include "study/study_run.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <deque>
#include <optional>
#include <cmath>
#include <fstream>
#include <memory>
#include <set>

#include "analysis/align.h"
#include "analysis/locality.h"
#include "analysis/sentence_states.h"
#include "core/error.h"
#include "data/parallel_set.h"
#include "data/tokenizer.h"
#include "models/convert.h"
#include "models/hf_config.h"
#include "models/placements.h"
#include "models/safetensors.h"
#include "study/study_report.h"
#include "study/study_stage.h"
#include "study/study_tasks.h"
#include "train/checkpoint_io.h"
#include "train/compare.h"

#ifndef HLM_SOURCE_DIR
#define HLM_SOURCE_DIR ""
#endif
#ifndef HLM_BUILD_TYPE
#define HLM_BUILD_TYPE "unknown"
#endif
#ifndef HLM_VERSION
#define HLM_VERSION "unknown"
#endif

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class Progress {
 public:
  void line(const std::string& stage, const std::string& text) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::printf("study [%s] %s  (%.0f s)\n", stage.c_str(), text.c_str(), s);
    std::fflush(stdout);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::string command_output(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::vector<std::pair<std::string, std::string>> versions() {
  std::string git;
  if (std::string(HLM_SOURCE_DIR).size() > 0)
    git = command_output(std::string("git -C '") + HLM_SOURCE_DIR + "' describe --always --dirty --tags 2>/dev/null");
  const std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return {{"hybridlm", HLM_VERSION},
          {"git describe", git.empty() ? "(not available)" : git},
          {"build type", HLM_BUILD_TYPE},
          {"report date", date}};
}

// Runs (or resumes) one training job into `dir`: a run that finished (model/ and test.json; killed before its done
// marker) is kept, an unfinished one resumes from its newest checkpoint (a damaged checkpoint is an input error
// naming the file, never a silent restart), otherwise it starts over in an empty directory. Throws unless the run
// completed; a run whose final evaluation failed keeps its model (the message says how to finish it).
void train_stage(TrainConfig config, const fs::path& dir, const StudyDevices& devices) {
  config.out = dir.string();
  config.resume.clear();
  if (fs::exists(dir / "model") && fs::exists(dir / "test.json")) return;
  if (fs::exists(dir) && !checkpoint_list(dir).empty()) {
    config.resume = dir.string();
  } else {
    fs::remove_all(dir);
  }
  std::unique_ptr<TrainDevice> device;
  if (config.device != "cpu") {
    HLM_CHECK_INPUT(static_cast<bool>(devices.train), "study: device '", config.device,
                    "' needs an accelerator, and this caller passed none");
    device = devices.train(config.device, config.precision);
  }
  const TrainResult r = train_run(config, {}, device.get());
  if (r.status == TrainStatus::Diverged)
    throw_internal_error(dir.string(), ": the training run diverged: ", r.message);
  if (r.status == TrainStatus::EvaluationFailed) throw_input_error(dir.string(), ": ", r.message);
  HLM_CHECK(r.status == TrainStatus::Completed || r.status == TrainStatus::DataExhausted, dir.string(),
            ": the training run did not finish: ", r.message);
}

struct ModelStage {
  std::string label;
  std::string student_dir;  // the converted student it was distilled from (runs only)
  std::string student_stamp;
  fs::path dir;        // model directory
  std::string stamp;   // of the stage that produced it
  std::vector<int> full_layers;
  int layers = 0;
  std::string same_as;  // the student whose run this placement shares (identical layers), else ""
};

void to_stderr(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

// Everything the stages can check before the first of them runs: --out usable, and each training stage's settings,
// corpus, tokenizer and held-out rows (a distill setting that fails must not surface after the teacher's training).
void study_preflight(const StudyConfig& config, const fs::path& out) {
  fs::path existing = out;
  while (!fs::exists(existing) && existing.has_parent_path() && existing.parent_path() != existing)
    existing = existing.parent_path();
  HLM_CHECK_INPUT(fs::is_directory(existing), "--out ", out.string(), ": ", existing.string(), " is not a directory");
  HLM_CHECK_INPUT(::access(existing.c_str(), W_OK | X_OK) == 0, "--out ", out.string(), ": cannot write into ",
                  existing.string(), " (", std::strerror(errno), ")");
  const auto check = [&](TrainConfig c, const char* section) {
    c.data = config.data;
    c.tokenizer = config.tokenizer;
    c.out = (out / "preflight").string();  // not created: the name only satisfies the setting checks
    if (c.job == TrainJob::Pretrain && c.model_config.empty()) c.model_config = "teacher_model_config.json";
    if (c.job == TrainJob::Distill) c.teacher = c.student = "model";
    try {
      train_check_data(c);
    } catch (Error& e) {
      e.add_context("study config, section '", section, "'");
      throw;
    }
  };
  if (config.teacher_dir.empty()) check(config.pretrain, "pretrain");
  check(config.distill, "distill");
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int i : v) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

}  // namespace

StudyResult study_run(const StudyConfig& config, const fs::path& out_arg, const StudyDevices& devices, int jobs) {
  study_config_validate(config);
  HLM_CHECK_INPUT(jobs >= 1, "study: --jobs ", jobs, " must be at least 1");
  if (jobs > 1) {
    // Stages side by side are processes on the CPU: several trainers planning one GPU's memory each would not fit.
    const bool cpu = (!config.teacher_dir.empty() || config.pretrain.device == "cpu") &&
                     config.distill.device == "cpu" && (config.parallel.empty() || config.analysis_device == "cpu");
    HLM_CHECK_INPUT(cpu, "study: --jobs ", jobs, " runs stages side by side on the CPU only; this config trains or "
                    "analyses on '", config.distill.device == "cpu" ? config.pretrain.device : config.distill.device,
                    "' (use --jobs 1)");
  }
  const fs::path out = fs::absolute(out_arg).lexically_normal();
  const json resolved = study_config_to_json(config);
  const int L = study_teacher_layers(config);
  const std::vector<StudyStudent> students = study_resolve_students(config, L);
  const std::set<std::string> excluded = study_excluded_languages(config);
  const std::vector<uint64_t> seeds = study_data_seeds(config);
  study_preflight(config, out);

  // The output directory belongs to one config: a rerun must resolve to the same settings.
  const fs::path config_path = out / "study_config.json";
  if (fs::exists(config_path)) {
    std::ifstream in(config_path);
    json saved;
    try {
      saved = json::parse(in);
    } catch (const json::exception&) {
      throw_input_error(config_path.string(), ": not JSON (delete it or use another --out)");
    }
    // A study saved before the trainer had `passes` ran one pass: the setting's default, so it still matches.
    for (const char* section : {"pretrain", "distill"})
      if (saved.contains(section) && saved[section].is_object() && !saved[section].contains("passes"))
        saved[section]["passes"] = 1;
    HLM_CHECK_INPUT(saved == resolved, out.string(),
                    ": holds a study made with a different config (see its study_config.json); use another --out");
  } else {
    fs::create_directories(out);
    file_write_atomic(config_path, resolved.dump(2) + "\n");
  }
  std::printf("study: resolved config (saved as %s)\n%s\n", config_path.string().c_str(), resolved.dump(2).c_str());
  std::printf("study: %d teacher layers; students:", L);
  for (const StudyStudent& s : students)
    std::printf(" %s [%s]", s.label.c_str(), join_ints(s.full_layers).c_str());
  std::printf("\n");
  std::fflush(stdout);

  Progress progress;
  StudyResult result;
  const auto skipped = [&](const std::string& stage, const std::string& what) {
    progress.line(stage, "skipped (done): " + what);
    ++result.stages_skipped;
  };
  // The stages as tasks (study_tasks.h), in the order one job runs them. ModelStage entries live in `store` (stable
  // addresses): a task's start() or finish() fills in the stamps that later tasks' start() read.
  std::vector<StudyTask> tasks;
  std::deque<ModelStage> store;
  std::unique_ptr<Model> teacher_model;  // loaded by the first convert that runs inline (one job)
  const auto release_teacher = [&] { teacher_model.reset(); };

  // (a) Teacher.
  ModelStage& teacher = store.emplace_back();
  teacher.label = "teacher";
  teacher.layers = L;
  for (int i = 0; i < L; ++i) teacher.full_layers.push_back(i);
  std::vector<size_t> after_teacher;  // empty when the config names an existing teacher
  TrainConfig teacher_train;
  if (!config.teacher_dir.empty()) {
    teacher.dir = fs::absolute(config.teacher_dir).lexically_normal();
    teacher.stamp = "dir:" + teacher.dir.string();
    progress.line("teacher", "using " + teacher.dir.string());
  } else {
    const fs::path dir = out / "teacher";
    teacher.dir = dir / "model";
    after_teacher = {tasks.size()};
    tasks.push_back(
        {"teacher", "teacher", {},
         [&, dir] {
           if (auto stamp = stage_done_stamp(dir, json::object())) {
             teacher.stamp = *stamp;
             skipped("teacher", dir.string());
             return false;
           }
           teacher_train = config.pretrain;
           teacher_train.data = config.data;
           teacher_train.tokenizer = config.tokenizer;
           if (config.teacher_model.is_string()) {
             teacher_train.model_config = config.teacher_model.get<std::string>();
           } else {
             const fs::path model_config = out / "teacher_model_config.json";
             file_write_atomic(model_config, config.teacher_model.dump(2) + "\n");
             teacher_train.model_config = model_config.string();
           }
           progress.line("teacher",
                         "pretraining " + std::to_string(teacher_train.tokens) + " tokens into " + dir.string());
           return true;
         },
         [&, dir] { train_stage(teacher_train, dir, devices); },
         [&, dir] {
           teacher.stamp = stage_mark_done(dir, "teacher", json::object());
           progress.line("teacher", "done");
           ++result.stages_run;
         }});
  }

  // (c, d) One distillation run of a converted student (whose stamp `student_stamp` holds once its convert task has
  // started or finished) with one data seed into `run_dir`, skipped when done. Returns the run's entry.
  const auto add_distill = [&](const std::string& label, const std::vector<int>& full_layers,
                               const fs::path& student_dir, const std::string* student_stamp, uint64_t seed,
                               const fs::path& run_dir, std::vector<size_t> after) {
    const std::string name = seed == seeds.front() ? label : label + " seed " + std::to_string(seed);
    ModelStage* run = &store.emplace_back();
    run->label = label;
    run->dir = run_dir / "model";
    run->full_layers = full_layers;
    run->layers = L;
    run->student_dir = student_dir.string();
    auto inputs = std::make_shared<json>();
    auto train = std::make_shared<TrainConfig>();
    tasks.push_back(
        {"distill", name, std::move(after),
         [&, run, name, seed, run_dir, student_dir, student_stamp, inputs, train] {
           run->student_stamp = *student_stamp;
           // The main seed's inputs stay as they were before replicates existed, so older studies still skip them.
           *inputs = {{"student", *student_stamp}};
           if (seed != seeds.front()) (*inputs)["data_seed"] = seed;
           if (seed != seeds.front()) release_teacher();
           if (auto stamp = stage_done_stamp(run_dir, *inputs)) {
             run->stamp = *stamp;
             skipped("distill", name);
             return false;
           }
           *train = config.distill;
           train->data = config.data;
           train->tokenizer = config.tokenizer;
           train->teacher = teacher.dir.string();
           train->student = student_dir.string();
           train->data_seed = seed;
           const bool resuming =
               fs::exists(run_dir) && !fs::exists(run_dir / "test.json") && !checkpoint_list(run_dir).empty();
           progress.line("distill", name + (resuming ? ": resuming from its newest checkpoint"
                                                     : ": " + std::to_string(train->tokens) + " tokens"));
           return true;
         },
         [&, run_dir, train] { train_stage(*train, run_dir, devices); },
         [&, run, name, run_dir, inputs] {
           run->stamp = stage_mark_done(run_dir, "distill", *inputs);
           progress.line("distill", name + " done");
           ++result.stages_run;
         }});
    return run;
  };

  // (b) Students and (c, d) their distillation runs. runs[i]: placement i's run; run_task[i]: the task that makes
  // it; run_student[i]: its student's stamp and convert task.
  std::vector<ModelStage*> runs;
  std::vector<size_t> run_task;
  std::vector<std::pair<const std::string*, size_t>> run_student;
  for (const StudyStudent& s : students) {
    // Placements that resolve to the same layers (small L) share one student: same data and seeds give the same run.
    const auto same = std::find_if(runs.begin(), runs.end(),
                                   [&](const ModelStage* r) { return r->full_layers == s.full_layers; });
    if (same != runs.end()) {
      const size_t source = static_cast<size_t>(same - runs.begin());
      ModelStage* shared = &store.emplace_back(**same);
      shared->label = s.label;
      shared->same_as = (*same)->same_as.empty() ? (*same)->label : (*same)->same_as;
      // A task without work, for the line in its place (with several jobs: once the shared run is done).
      tasks.push_back({"distill", s.label, {run_task[source]}, [&, shared] {
                         progress.line("distill", shared->label + ": same layers as " + shared->same_as +
                                                      ", shares its run");
                         return false;
                       },
                       {}, {}});
      runs.push_back(shared);
      run_task.push_back(run_task[source]);
      run_student.push_back(run_student[source]);
      continue;
    }
    const fs::path student_dir = out / "students" / s.label;
    std::string* student_stamp = &store.emplace_back().stamp;
    const size_t convert_task = tasks.size();
    auto inputs = std::make_shared<json>();
    tasks.push_back(
        {"convert", s.label, after_teacher,
         [&, s, student_dir, student_stamp, inputs] {
           *inputs = {{"teacher", teacher.stamp}, {"full_layers", s.full_layers}};
           if (auto stamp = stage_done_stamp(student_dir, *inputs)) {
             *student_stamp = *stamp;
             skipped("convert", s.label);
             return false;
           }
           progress.line("convert", s.label + ": full attention in layers " + join_ints(s.full_layers) + " (" +
                                        placement_layout(s.full_layers, L) + ")");
           return true;
         },
         [&, s, student_dir] {
           if (!teacher_model) teacher_model = std::make_unique<Model>(Model::load(teacher.dir));
           fs::remove_all(student_dir);
           const ConvertOptions options{.neg_eigval = config.neg_eigval, .seed = config.convert_seed};
           convert_to_hybrid(*teacher_model, s.full_layers, options).save(student_dir);
         },
         [&, student_dir, student_stamp, inputs] {
           *student_stamp = stage_mark_done(student_dir, "convert", *inputs);
           ++result.stages_run;
         }});
    runs.push_back(add_distill(s.label, s.full_layers, student_dir, student_stamp, seeds.front(),
                               out / "runs" / s.label, {convert_task}));
    run_task.push_back(tasks.size() - 1);
    run_student.push_back({student_stamp, convert_task});
  }

  // Replicates: each placement of replicates.placements again with every other data seed, into runs/<label>.seed<k>
  // (students are seed-independent). Placements with the same layers share one run per seed, as above.
  // replicate_runs[p][k]: placement config.replicate order as resolved (baseline first), seed k.
  std::vector<std::vector<ModelStage*>> replicate_runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    ModelStage* main_run = runs[i];
    if (std::find(config.replicate.begin(), config.replicate.end(), main_run->label) == config.replicate.end())
      continue;
    std::vector<ModelStage*> per_seed = {main_run};
    for (size_t k = 1; k < seeds.size(); ++k) {
      const ModelStage* shared = nullptr;
      for (const std::vector<ModelStage*>& earlier : replicate_runs)
        if (earlier[k]->full_layers == main_run->full_layers) shared = earlier[k];
      if (shared) {
        ModelStage* copy = &store.emplace_back(*shared);
        copy->same_as = shared->same_as.empty() ? shared->label : shared->same_as;
        copy->label = main_run->label;
        per_seed.push_back(copy);
        continue;
      }
      per_seed.push_back(add_distill(main_run->label, main_run->full_layers, main_run->student_dir,
                                     run_student[i].first, seeds[k],
                                     out / "runs" / (main_run->label + ".seed" + std::to_string(seeds[k])),
                                     {run_student[i].second}));
    }
    replicate_runs.push_back(std::move(per_seed));
  }

  // (f) SoftCKA and locality of the teacher and every student, each as soon as its model is there.
  std::vector<std::pair<const ModelStage*, std::vector<size_t>>> analysed = {{&teacher, after_teacher}};
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]->same_as.empty()) analysed.push_back({runs[i], {run_task[i]}});
  std::vector<StudyReportModel> report_models;
  std::unique_ptr<ParallelSet> set;
  std::unique_ptr<Tokenizer> tokenizer;
  const auto load_inputs = [&] {
    release_teacher();
    if (set) return;
    set = std::make_unique<ParallelSet>(parallel_set_load(config.parallel));
    tokenizer = tokenizer_load(config.tokenizer);
  };
  if (!config.parallel.empty()) {
    for (const auto& entry : analysed) {
      const ModelStage* m = entry.first;
      const std::vector<size_t>& after = entry.second;
      StudyReportModel rm;
      rm.label = m->label;
      rm.layers = m->layers;
      rm.full_layers = m->full_layers;
      rm.align_dir = out / "align" / m->label;
      rm.locality_dir = out / "locality" / m->label;
      auto align = std::make_shared<AlignSettings>();
      tasks.push_back(
          {"align", m->label, after,
           [&, m, dir = rm.align_dir, align] {
             if (stage_done_stamp(dir, {{"model", m->stamp}})) {
               skipped("align", m->label);
               return false;
             }
             load_inputs();
             AlignSettings& a = *align;
             a.anchor = config.anchor;
             a.langs = config.align_langs;
             if (a.langs.empty())
               for (const std::string& lang : set->langs)
                 if (lang != config.anchor) a.langs.push_back(lang);
             std::string points;
             for (const std::string& p : config.align_points) points += (points.empty() ? "" : ",") + p;
             a.points = parse_layer_points(points);
             a.max_pairs = config.max_pairs;
             a.sigma_sample_tokens = config.sigma_sample;
             progress.line("align", m->label + ": SoftCKA, " + std::to_string(a.langs.size()) + " languages vs " +
                                        a.anchor + ", up to " + std::to_string(a.max_pairs) + " pairs each");
             return true;
           },
           [&, m, dir = rm.align_dir, align] {
             Model model = Model::load(m->dir);
             const bool on_gpu = config.analysis_device != "cpu";
             HLM_CHECK_INPUT(!on_gpu || (devices.states_forward && devices.kernel_engine), "study: analysis.device '",
                             config.analysis_device, "' needs an accelerator, and this caller passed none");
             const std::unique_ptr<KernelNormEngine> engine = on_gpu ? devices.kernel_engine() : nullptr;
             const AlignResult r = align_softcka(model, *tokenizer, *set, *align, to_stderr, engine.get(),
                                                 on_gpu ? devices.states_forward(model) : StatesForward{},
                                                 config.analysis_device);
             fs::remove_all(dir);
             align_write_outputs(dir, r, model.config(),
                                 {{"model", m->dir.string()}, {"tokenizer", tokenizer->name()},
                                  {"parallel", config.parallel}});
           },
           [&, m, dir = rm.align_dir] {
             stage_mark_done(dir, "align", {{"model", m->stamp}});
             ++result.stages_run;
           }});
      tasks.push_back(
          {"locality", m->label, after,
           [&, m, dir = rm.locality_dir] {
             if (stage_done_stamp(dir, {{"model", m->stamp}})) {
               skipped("locality", m->label);
               return false;
             }
             load_inputs();
             progress.line("locality", m->label + ": attention share on the last k tokens");
             return true;
           },
           [&, m, dir = rm.locality_dir] {
             LocalitySettings ls;
             ls.windows = config.locality_k;
             ls.max_units = config.locality_max_units;
             if (!config.align_langs.empty()) {  // the anchor and the SoftCKA languages; else every language of the set
               ls.langs = {config.anchor};
               ls.langs.insert(ls.langs.end(), config.align_langs.begin(), config.align_langs.end());
             }
             Model model = Model::load(m->dir);
             const LocalityResult r = attention_locality(model, m->label, *tokenizer, *set, ls, to_stderr);
             fs::remove_all(dir);
             locality_write_outputs(dir, {r});
           },
           [&, m, dir = rm.locality_dir] {
             stage_mark_done(dir, "locality", {{"model", m->stamp}});
             ++result.stages_run;
           }});
      report_models.push_back(rm);
    }
  }

  study_tasks_run(tasks, jobs, out / "logs");
  release_teacher();
  // The runs as the report reads them (their stamps are final now).
  std::vector<ModelStage> runs_done;
  for (const ModelStage* r : runs) runs_done.push_back(*r);
  std::vector<std::vector<ModelStage>> replicates_done;
  for (const std::vector<ModelStage*>& per_seed : replicate_runs) {
    replicates_done.emplace_back();
    for (const ModelStage* r : per_seed) replicates_done.back().push_back(*r);
  }

  // (e, g) Comparison and report.
  const fs::path report_dir = out / "report";
  result.report = report_dir / "report.html";
  if (result.stages_run == 0 && fs::exists(result.report)) {
    skipped("report", result.report.string());
    return result;
  }
  progress.line("report", "R, delta-bar, Figure 6 shares, tables and plots");
  StudyReport report;
  report.config = resolved;
  report.teacher = teacher.dir.string();
  {
    // The teacher's and students' architectures as their config.json files say, and the Granite scalars when the
    // teacher's config class has them (model_config_to_json writes them only then).
    const json teacher_json = model_config_to_json(load_model_config(teacher.dir / "config.json"));
    report.teacher_architecture = teacher_json.value("model_type", std::string());
    for (const char* key : {"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"})
      if (teacher_json.contains(key)) report.teacher_scalars.emplace_back(key, teacher_json[key].get<double>());
    report.student_architecture =
        load_model_config(out / "students" / students.front().label / "config.json").model_type;
  }
  std::vector<CompareRun> compare_runs_in;
  for (const ModelStage& r : runs_done) {
    compare_runs_in.push_back(compare_run_load(r.dir.parent_path(), r.label));
    if (!r.same_as.empty()) compare_runs_in.back().source += " (as " + r.label + ")";  // a column of its own
  }
  report.table = compare_runs(compare_runs_in.front(), compare_runs_in, excluded);
  for (size_t i = 0; i < runs_done.size(); ++i) {
    StudyReportRun rr;
    rr.label = runs_done[i].label;
    rr.full_layers = runs_done[i].full_layers;
    rr.layout = placement_layout(runs_done[i].full_layers, L);
    rr.same_as = runs_done[i].same_as;
    rr.curve = study_read_curve(runs_done[i].dir.parent_path() / "metrics.jsonl", excluded);
    rr.total_tokens = rr.curve.back().tokens;
    report.runs.push_back(rr);
  }
  if (config.teacher_dir.empty())
    report.data_budget.push_back(study_data_budget_read(out / "teacher", "teacher (pretrain)"));
  report.data_budget.push_back(study_data_budget_read(runs_done.front().dir.parent_path(),
                                                      "distill (" + runs_done.front().label + ")"));
  report.target_gap = report.runs.front().curve.back().mean_ce_gap;
  for (StudyReportRun& rr : report.runs) {
    const StudyReach reach = study_reach(rr.curve, report.target_gap);
    rr.reach_tokens = reach.reach;
    rr.crossing_tokens = reach.crossing;
  }
  if (!replicates_done.empty()) {
    StudyReplicates& rep = report.replicates;
    rep.data_seeds = seeds;
    rep.languages = report.table.languages;
    rep.excluded = report.table.excluded;
    for (const std::vector<ModelStage>& per_seed : replicates_done) {
      StudyReplicated p;
      p.label = per_seed.front().label;
      if (per_seed.size() > 1) p.same_as = per_seed[1].same_as;
      p.seeds.resize(seeds.size());
      rep.placements.push_back(std::move(p));
    }
    for (size_t k = 0; k < seeds.size(); ++k) {
      // Seed k's table: every replicated placement against the baseline's run with seed k (replicates_done[0]).
      std::vector<CompareRun> in;
      for (const std::vector<ModelStage>& per_seed : replicates_done) {
        in.push_back(compare_run_load(per_seed[k].dir.parent_path(), per_seed[k].label));
        in.back().source += " (seed " + std::to_string(seeds[k]) + ", as " + per_seed[k].label + ")";
      }
      const CompareTable t = compare_runs(in.front(), in, excluded);
      HLM_CHECK(t.languages == rep.languages, "study: seed ", seeds[k], "'s evaluations have other languages");
      double target = 0.0;
      for (size_t p = 0; p < replicates_done.size(); ++p) {
        StudySeedResult& r = rep.placements[p].seeds[k];
        r.seed = seeds[k];
        r.relative_kl = t.relative_kl[p];
        r.delta_bar = t.delta_bar[p];
        double kl = 0.0;
        int n = 0;
        for (size_t l = 0; l < t.languages.size(); ++l) {
          r.kl.push_back(t.kl[l][p]);
          r.ce_gap.push_back(t.ce_gap[l][p]);
          if (!t.excluded[l]) kl += t.kl[l][p], ++n;
        }
        r.mean_kl = n ? kl / n : NAN;
        r.curve = study_read_curve(replicates_done[p][k].dir.parent_path() / "metrics.jsonl", excluded);
        r.total_tokens = r.curve.back().tokens;
        if (p == 0) target = r.curve.back().mean_ce_gap;
        const StudyReach reach = study_reach(r.curve, target);
        r.reach_tokens = reach.reach;
        r.crossing_tokens = reach.crossing;
      }
    }
  }
  report.models = report_models;
  report.align_points = config.align_points;
  report.locality_k = config.locality_k;
  report.versions = versions();
  fs::remove_all(report_dir);
  fs::create_directories(report_dir);
  study_write_report(report_dir, report);
  ++result.stages_run;
  progress.line("report", "written: " + result.report.string());
  return result;
}

}  // namespace hlm
