// `hybridlm study` with a granite teacher (issue #24 item 2, the seed's Figure 6b): teacher.architecture "granite"
// turns the model_config into a Granite one with the four multipliers of teacher.granite; the students convert to
// granite_hybrid and keep them; the report names the architectures. Toy scale on the tiny generated corpus
// (tests/train/test_trainer_fixture.h): 2 layers, a few steps, no parallel set. Plus the config rules (defaults,
// round trip, errors) without running anything.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/hf_config.h"
#include "study/study_config.h"
#include "train/test_trainer_fixture.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json granite_study_config(const fs::path& corpus) {
  return {{"data", corpus.string()},
          {"parallel", ""},
          {"teacher",
           {{"model_config", json::parse(test::tiny_teacher_config_json(4))},
            {"architecture", "granite"},
            {"granite", {{"embedding_multiplier", 6.0}, {"logits_scaling", 2.5}}}}},
          {"pretrain",
           {{"tokens", 4 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 4}, {"lr", 3e-3},
            {"held_out_docs", 20}, {"eval_tokens", 256}, {"eval_every_tokens", 0}, {"log_every_steps", 1000}}},
          {"distill",
           {{"tokens", 4 * 4 * 64}, {"seq_len", 64}, {"batch_rows", 4}, {"micro_batch_rows", 4}, {"lr_rec", 3e-3},
            {"lr_rest", 1e-3}, {"min_lr", 1e-4}, {"warmup_steps", 1}, {"held_out_docs", 20}, {"eval_tokens", 256},
            {"eval_every_tokens", 2 * 4 * 64}, {"log_every_steps", 1000}}},
          {"placements", {{"names", {"standard_periodic", "reverse_periodic"}}, {"full", 1}}}};
}

TEST(StudyGraniteConfig, DefaultsRoundTripAndErrors) {
  // The demo teacher is qwen3 without Granite scalars.
  const StudyConfig demo = study_config_defaults();
  EXPECT_EQ(demo.teacher_architecture, "qwen3");
  EXPECT_FALSE(demo.teacher_model.contains("embedding_multiplier"));
  EXPECT_FALSE(study_config_to_json(demo)["teacher"].contains("granite"));

  // architecture granite alone: the Granite-4.x defaults (12, 1/64, 0.22, 10) go into the model config.
  const StudyConfig g = study_config_from_json(json{{"teacher", {{"architecture", "granite"}}}}, "t");
  EXPECT_EQ(g.teacher_model["model_type"], "granite");
  EXPECT_EQ(g.teacher_model["architectures"], json::array({"GraniteForCausalLM"}));
  EXPECT_EQ(g.teacher_model["embedding_multiplier"], 12.0);
  EXPECT_EQ(g.teacher_model["attention_multiplier"], 0.015625);
  EXPECT_EQ(g.teacher_model["residual_multiplier"], 0.22);
  EXPECT_EQ(g.teacher_model["logits_scaling"], 10.0);
  const ModelConfig parsed = parse_model_config(g.teacher_model, "t");
  EXPECT_EQ(parsed.architecture, Architecture::Granite);
  EXPECT_EQ(parsed.residual_multiplier, 0.22);
  // The resolved config reads back to itself (a rerun into the same --out compares them).
  const json resolved = study_config_to_json(g);
  EXPECT_EQ(resolved["teacher"]["granite"]["logits_scaling"], 10.0);
  EXPECT_EQ(study_config_to_json(study_config_from_json(resolved, "resolved")), resolved);

  // Back to qwen3: the Granite keys leave the model config.
  const StudyConfig q = study_config_from_json(
      json{{"teacher", {{"model_config", g.teacher_model}, {"architecture", "qwen3"}}}}, "t");
  EXPECT_EQ(q.teacher_model["model_type"], "qwen3");
  EXPECT_FALSE(q.teacher_model.contains("logits_scaling"));

  const auto input_error = [](const json& j, const std::string& needle) {
    try {
      study_config_from_json(j, "t");
      ADD_FAILURE() << j.dump() << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  input_error(json{{"teacher", {{"architecture", "llama"}}}}, "qwen3 or granite");
  input_error(json{{"teacher", {{"granite", {{"logits_scaling", 2.0}}}}}}, "granite teacher");
  input_error(json{{"teacher", {{"architecture", "granite"}, {"granite", {{"logit_scaling", 2.0}}}}}}, "logit_scaling");
  input_error(json{{"teacher", {{"architecture", "granite"}, {"granite", {{"logits_scaling", 0.0}}}}}}, "non-zero");
  input_error(json{{"teacher", {{"dir", "/x"}, {"granite", {{"logits_scaling", 2.0}}}}}}, "model_config object");
}

TEST(StudyGranite, RunsEndToEndAndStudentsKeepTheMultipliers) {
  test::use_one_thread();
  const fs::path dir = fs::temp_directory_path() / ("hlm_study_granite_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  test::write_tiny_corpus(dir / "corpus", 300);
  const fs::path config = dir / "study.json";
  std::ofstream(config) << granite_study_config(dir / "corpus").dump(2);
  const fs::path out = dir / "out";
  const fs::path log = dir / "study.log";
  const std::string cmd = std::string(HLM_BINARY) + " study --config " + config.string() + " --out " + out.string() +
                          " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);

  // The teacher: granite, with teacher.granite over the Granite-4.x defaults.
  const ModelConfig teacher = load_model_config(out / "teacher/model/config.json");
  EXPECT_EQ(teacher.model_type, "granite");
  EXPECT_EQ(teacher.embedding_multiplier, 6.0);
  EXPECT_EQ(teacher.logits_scaling, 2.5);
  EXPECT_EQ(teacher.attention_multiplier, 0.015625);
  EXPECT_EQ(teacher.residual_multiplier, 0.22);
  // Every student (standard periodic 3, reverse periodic 0 of 4 layers): granite_hybrid with the same four scalars,
  // after conversion and after distillation.
  for (const char* label : {"standard_periodic", "reverse_periodic"}) {
    for (const fs::path& model : {out / "students" / label, out / "runs" / label / "model"}) {
      const ModelConfig s = load_model_config(model / "config.json");
      EXPECT_EQ(s.model_type, "granite_hybrid") << model;
      EXPECT_EQ(s.architecture, Architecture::GraniteHybrid) << model;
      EXPECT_EQ(s.embedding_multiplier, teacher.embedding_multiplier) << model;
      EXPECT_EQ(s.attention_multiplier, teacher.attention_multiplier) << model;
      EXPECT_EQ(s.residual_multiplier, teacher.residual_multiplier) << model;
      EXPECT_EQ(s.logits_scaling, teacher.logits_scaling) << model;
      int full = 0;
      for (const std::string& t : s.layer_types) full += t == "full_attention";
      EXPECT_EQ(full, 1) << model;
    }
  }
  EXPECT_EQ(load_model_config(out / "students/reverse_periodic/config.json").layer_types[0], "full_attention");
  EXPECT_EQ(load_model_config(out / "students/standard_periodic/config.json").layer_types[3], "full_attention");

  // The report names the teacher's architecture, its multipliers and the students' architecture.
  const json summary = json::parse(read_text(out / "report/summary.json"));
  EXPECT_EQ(summary["teacher"]["architecture"], "granite");
  EXPECT_EQ(summary["teacher"]["student_architecture"], "granite_hybrid");
  EXPECT_EQ(summary["teacher"]["scalars"]["logits_scaling"], 2.5);
  EXPECT_EQ(summary["teacher"]["scalars"]["embedding_multiplier"], 6.0);
  EXPECT_EQ(summary["placements"].size(), 2u);
  EXPECT_EQ(summary["placements"][0]["R"].get<double>(), 1.0);
  const std::string html = read_text(out / "report/report.html");
  EXPECT_NE(html.find("architecture <b>granite</b>: embedding_multiplier 6"), std::string::npos);
  EXPECT_NE(html.find("students <b>granite_hybrid</b> with the same multipliers"), std::string::npos);
  const json resolved = json::parse(read_text(out / "study_config.json"));
  EXPECT_EQ(resolved["teacher"]["architecture"], "granite");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hlm
