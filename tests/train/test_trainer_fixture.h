// Shared pieces of the trainer tests (tests/train/test_trainer*.cpp, tests/cli/test_cli_train*.cpp): a small
// multilingual corpus generated deterministically, a tiny dense qwen3 teacher config (bytes vocabulary), and
// TrainConfigs sized to run in a fraction of a second per hundred steps on two cores.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "models/convert.h"
#include "models/model.h"
#include "train/trainer.h"

namespace hlm::test {

extern "C" void openblas_set_num_threads(int);  // OpenBLAS's own API (cblas.h), linked through hlm_ops

// The tiny models of these tests are far too small for threads to pay off: with 2 OpenMP threads on 2 cores a step
// spent ~85% of its time spinning in libgomp and OpenBLAS's worker threads (perf; 1.4M sched_yield calls in one
// run), so the trainer tests run on one thread. Child processes get the same through the environment.
inline void use_one_thread() {
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
}

// Four languages (one per tier, two scripts). Each document strings together 2-5 phrases of its language, picked by a
// fixed LCG, so the text is learnable (a byte model can get far below log 256 nats) yet not trivial.
inline void write_tiny_corpus(const std::filesystem::path& dir, int docs_per_language = 900) {
  const std::vector<CorpusLanguage> languages = {
      {"eng_Latn", "", "anchor", 0}, {"fra_Latn", "", "high", 0}, {"deu_Latn", "", "mid", 0},
      {"rus_Cyrl", "", "low", 0}};
  const std::vector<std::vector<std::string>> phrases = {
      {"the cat sat on the mat. ", "a dog runs in the park. ", "we like green tea. ", "the sun is warm today. ",
       "birds sing at dawn. "},
      {"le chat dort sur le tapis. ", "un chien court au parc. ", "nous aimons le the vert. ",
       "le soleil est chaud. ", "les oiseaux chantent. "},
      {"die katze schlaeft auf der matte. ", "ein hund rennt im park. ", "wir moegen gruenen tee. ",
       "die sonne ist warm. ", "die voegel singen. "},
      {"кошка спит на ковре. ", "собака бежит в парке. ", "мы любим зелёный чай. ", "солнце тёплое. ",
       "птицы поют. "}};
  std::vector<std::vector<std::string>> docs(languages.size());
  uint64_t state = 12345;
  const auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  for (size_t l = 0; l < languages.size(); ++l) {
    for (int d = 0; d < docs_per_language; ++d) {
      std::string text;
      const uint64_t k = 2 + next(4);
      for (uint64_t i = 0; i < k; ++i) text += phrases[l][next(phrases[l].size())];
      docs[l].push_back(text);
    }
  }
  corpus_write(dir, languages, docs);
}

// A dense qwen3 teacher: bytes vocabulary, hidden 32, 2 layers, 4 query / 2 kv heads of 8, tied embeddings.
inline std::string tiny_teacher_config_json(int layers = 2) {
  std::string types;
  for (int i = 0; i < layers; ++i) types += std::string(i ? ", " : "") + "\"full_attention\"";
  return R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 256, "hidden_size": 32,
  "intermediate_size": 64, "num_hidden_layers": )" +
         std::to_string(layers) + R"(, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 8, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
  "attention_bias": false, "hidden_act": "silu", "dtype": "float32", "layer_types": [)" +
         types + R"(], "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})";
}

inline std::filesystem::path write_tiny_teacher_config(const std::filesystem::path& dir, int layers = 2) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "tiny_qwen3.json";
  std::ofstream(path) << tiny_teacher_config_json(layers);
  return path;
}

// Settings shared by the tiny runs: rows of 64 bytes, 20 held-out documents and 256 validation tokens per language.
inline TrainConfig tiny_train_config(TrainJob job, const std::filesystem::path& corpus,
                                     const std::filesystem::path& out) {
  TrainConfig c = train_config_defaults(job);
  c.data = corpus.string();
  c.out = out.string();
  c.seq_len = 64;
  c.batch_rows = 4;
  c.micro_batch_rows = 2;
  c.tokens = 40 * 4 * 64;
  c.held_out_docs = 20;
  c.eval_tokens = 256;
  c.eval_every_tokens = 10 * 4 * 64;
  c.checkpoint_every_steps = 0;
  c.log_every_steps = 1000;
  c.lr_rec = 3e-3;
  c.lr_rest = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_steps = 2;
  return c;
}

// A random tiny teacher saved at dir/teacher and its one-full-attention-layer student at dir/student.
inline void write_tiny_teacher_and_student(const std::filesystem::path& dir, uint64_t seed = 7) {
  const ModelConfig config = load_model_config(write_tiny_teacher_config(dir));
  const Model teacher = Model::create(config, seed);
  teacher.save(dir / "teacher");
  convert_to_hybrid(Model::load(dir / "teacher"), {0}, {}).save(dir / "student");
}

// The records of a metrics.jsonl file, optionally only those of one "type".
inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& path, const std::string& type = "") {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (type.empty() || j["type"] == type) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace hlm::test
