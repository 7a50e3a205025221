// One NIAH cell through the inference engine, and the CSV / Markdown reports (see niah_run.h).
#include "evals/niah/niah_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <new>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/unicode_text.h"
#include "evals/niah/niah_score.h"
#include "infer/generate.h"
#include "infer/memory_plan.h"

namespace hlm {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string length_label(int64_t length) {
  return length % 1000 == 0 ? std::to_string(length / 1000) + "K" : std::to_string(length);
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", 100.0 * x);
  return buf;
}

}  // namespace

int64_t niah_parse_size(const std::string& text, const std::string& option) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  const double scale = unit.empty() ? 1.0 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                       : unit == "G" ? 1073741824.0 : 0.0;
  HLM_CHECK_INPUT(end != text.c_str() && scale > 0 && std::isfinite(value) && value > 0 && value * scale < 9e18, option,
                  " '", text, "': not a size (bytes, or a number with K, M or G)");
  return static_cast<int64_t>(value * scale);
}

int64_t niah_kv_element_bytes(const std::string& precision, const std::string& option) {
  HLM_CHECK_INPUT(precision == "fp32" || precision == "bf16", option, " must be fp32 or bf16, got '", precision, "'");
  return precision == "bf16" ? 2 : 4;
}

int64_t niah_default_cpu_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 2 : int64_t{1} << 40;
}

NiahCell niah_evaluate_cell(const NiahEngineFactory& make_engine, const ModelConfig& config,
                            const std::vector<int32_t>& eos_ids, const Tokenizer& tokenizer, const NiahLanguage& lang,
                            const NiahTaskSpec& task, const std::vector<NiahSample>& samples,
                            const NiahRunSettings& settings, std::vector<NiahItem>* items) {
  HLM_CHECK_INPUT(!samples.empty(), "NIAH cell without samples");
  NiahCell cell;
  cell.lang = lang.code;
  cell.task = task.name;
  cell.length = samples.front().length;
  cell.n = static_cast<int64_t>(samples.size());

  std::vector<GenerateRequest> requests;
  int64_t total_prompt = 0;
  for (const NiahSample& s : samples) {
    GenerateRequest r;
    r.prompt = tokenizer.encode(s.prompt);
    r.max_new_tokens = settings.max_new_tokens;  // SamplingParams default: greedy
    total_prompt += static_cast<int64_t>(r.prompt.size());
    cell.max_prompt_tokens = std::max<int64_t>(cell.max_prompt_tokens, static_cast<int64_t>(r.prompt.size()));
    requests.push_back(std::move(r));
  }
  cell.mean_prompt_tokens = total_prompt / cell.n;
  if (config.max_position_embeddings > 0 && cell.max_prompt_tokens > config.max_position_embeddings) {
    cell.status = "too_long";
    cell.note = str_cat("prompt of ", cell.max_prompt_tokens, " tokens > max_position_embeddings ",
                        config.max_position_embeddings);
    return cell;
  }

  // The plan: up to max_batch sequences at once, KV blocks for the largest of them, capped by the budget; the KV
  // cache in the engine's element type.
  HLM_CHECK(settings.kv_element_bytes == 4 || settings.kv_element_bytes == 2, "NIAH kv_element_bytes ",
            settings.kv_element_bytes);
  const MemoryPlan shape = memory_plan_shape(config, settings.block_size, settings.kv_element_bytes);
  std::vector<int64_t> blocks;
  for (const GenerateRequest& r : requests) blocks.push_back(shape.blocks_for(generate_max_tokens(config, r)));
  std::sort(blocks.rbegin(), blocks.rend());
  MemoryRequest mr;
  mr.block_size = settings.block_size;
  mr.kv_element_bytes = settings.kv_element_bytes;
  mr.max_sequences = std::min<int64_t>(settings.max_batch, cell.n);
  mr.kv_blocks = 0;
  for (int64_t i = 0; i < mr.max_sequences; ++i) mr.kv_blocks += blocks[static_cast<size_t>(i)];
  mr.budget_bytes = settings.budget_bytes;

  GenerateStats stats;
  std::vector<GenerateResult> results;
  try {
    const MemoryPlan plan = memory_plan_build(config, mr);  // input error when not even one sequence fits
    cell.plan_bytes = plan.total_bytes();
    std::unique_ptr<InferenceEngine> engine = make_engine(plan);
    for (const GenerateRequest& r : requests) {
      const std::string why = generate_refusal(*engine, r);
      if (why.empty()) continue;
      // A context that does not fit the plan is the out-of-memory case; anything else (an id outside the model's
      // vocabulary: the wrong tokenizer) is bad input.
      HLM_CHECK_INPUT(why.find("KV blocks") != std::string::npos, "NIAH ", lang.code, " ", task.name, ": ", why);
      cell.status = "oom";
      cell.note = why;
      return cell;
    }
    GenerateOptions go;
    go.eos_ids = eos_ids;
    go.prefill_chunk = settings.prefill_chunk;
    std::vector<std::vector<int32_t>> so_far(requests.size());  // text ids generated so far, per request
    if (!settings.stop.empty())
      go.on_token = [&](size_t r, int32_t id) {
        if (std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end() || id >= tokenizer.vocab_size()) return true;
        so_far[r].push_back(id);
        return tokenizer.decode(so_far[r]).find(settings.stop) == std::string::npos;
      };
    const auto t0 = std::chrono::steady_clock::now();
    results = generate(*engine, requests, go, &stats);
    cell.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::bad_alloc&) {
    cell.status = "oom";
    cell.note = "allocation failed (std::bad_alloc)";
    return cell;
  } catch (const Error& e) {
    // A plan refused for memory (input), or a device allocation that failed (the CUDA allocator's internal error):
    // both are the out-of-memory outcome of this cell; anything else is a real failure.
    const std::string what = e.what();
    const bool refused = e.kind() == ErrorKind::Input && what.find("memory") != std::string::npos;
    if (!refused && what.find("CUDA out of memory") == std::string::npos) throw;
    cell.status = "oom";
    cell.note = e.what();
    return cell;
  }
  cell.prefill_seconds = stats.prefill_seconds;
  cell.decode_seconds = stats.decode_seconds;
  cell.peak_state_bytes = stats.peak_state_bytes;

  const std::vector<std::string> none_words = niah_none_words(lang);
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<int32_t> text_ids;  // EOS and ids past the tokenizer's vocabulary are not text
    for (int32_t id : results[i].ids)
      if (std::find(eos_ids.begin(), eos_ids.end(), id) == eos_ids.end() && id < tokenizer.vocab_size())
        text_ids.push_back(id);
    NiahItem item;
    item.index = samples[i].index;
    item.prompt_tokens = static_cast<int64_t>(requests[i].prompt.size());
    item.expected = samples[i].expected;
    item.response = utf8_lossy(tokenizer.decode(text_ids));  // broken UTF-8 (e.g. bytes cut mid-character) -> U+FFFD
    item.correct = niah_score(task.task, samples[i].expected, item.response, none_words);
    item.finish = finish_reason_name(results[i].finish);
    cell.correct += item.correct ? 1 : 0;
    if (items) items->push_back(std::move(item));
  }
  return cell;
}

std::string niah_cells_csv(const std::vector<NiahCell>& cells) {
  std::ostringstream os;
  os << "model,lang,task,length,status,n,correct,accuracy,seconds,prefill_seconds,decode_seconds,mean_prompt_tokens,"
        "max_prompt_tokens,peak_state_bytes,plan_bytes,note\n";
  for (const NiahCell& c : cells)
    os << csv_field(c.model) << "," << c.lang << "," << c.task << "," << c.length << "," << c.status << "," << c.n
       << "," << c.correct << "," << (c.status == "ok" ? std::to_string(c.accuracy()) : std::string()) << ","
       << c.seconds << "," << c.prefill_seconds << "," << c.decode_seconds << "," << c.mean_prompt_tokens << ","
       << c.max_prompt_tokens << "," << c.peak_state_bytes << "," << c.plan_bytes << "," << csv_field(c.note) << "\n";
  return os.str();
}

std::string niah_cells_markdown(const std::vector<NiahCell>& cells) {
  std::vector<std::string> models;
  std::set<int64_t> length_set;
  std::set<std::string> other_langs;
  for (const NiahCell& c : cells) {
    if (std::find(models.begin(), models.end(), c.model) == models.end()) models.push_back(c.model);
    length_set.insert(c.length);
    if (c.lang != "eng_Latn") other_langs.insert(c.lang);
  }
  const std::vector<int64_t> lengths(length_set.begin(), length_set.end());
  // Mean accuracy over the cells that ran in a group, with the count of those that did not.
  auto summary = [&](const std::string& model, int64_t length, const std::function<bool(const NiahCell&)>& in_group) {
    double sum = 0;
    int ran = 0, oom = 0, too_long = 0;
    for (const NiahCell& c : cells) {
      if (c.model != model || c.length != length || !in_group(c)) continue;
      if (c.status == "ok") {
        sum += c.accuracy();
        ++ran;
      } else {
        ++(c.status == "oom" ? oom : too_long);
      }
    }
    if (ran + oom + too_long == 0) return std::string("–");
    if (ran == 0) return std::string(too_long == 0 ? "OOM" : oom == 0 ? "too long" : "not run");
    std::string out = percent(sum / ran);
    if (oom + too_long > 0) out += " (" + std::to_string(oom + too_long) + " not run)";
    return out;
  };
  std::ostringstream os;
  os << "NIAH accuracy (%), mean over tasks";
  if (!other_langs.empty()) os << " (non-English: also over " << other_langs.size() << " languages)";
  os << "; OOM: out of memory, too long: a prompt past the model's max_position_embeddings, (k not run): cells of the "
        "group that did not run\n\n| model |";
  for (int64_t l : lengths) os << " English " << length_label(l) << " |";
  if (!other_langs.empty())
    for (int64_t l : lengths) os << " Non-Eng (" << other_langs.size() << " langs) " << length_label(l) << " |";
  os << "\n|---|";
  for (size_t i = 0; i < lengths.size() * (other_langs.empty() ? 1 : 2); ++i) os << "---:|";
  os << "\n";
  for (const std::string& m : models) {
    os << "| " << m << " |";
    for (int64_t l : lengths) os << " " << summary(m, l, [](const NiahCell& c) { return c.lang == "eng_Latn"; }) << " |";
    if (!other_langs.empty())
      for (int64_t l : lengths)
        os << " " << summary(m, l, [](const NiahCell& c) { return c.lang != "eng_Latn"; }) << " |";
    os << "\n";
  }

  // Per language.
  std::set<std::string> langs;
  for (const NiahCell& c : cells) langs.insert(c.lang);
  os << "\nPer language (mean over tasks)\n\n| model | language |";
  for (int64_t l : lengths) os << " " << length_label(l) << " |";
  os << "\n|---|---|";
  for (size_t i = 0; i < lengths.size(); ++i) os << "---:|";
  os << "\n";
  for (const std::string& m : models)
    for (const std::string& lang : langs) {
      os << "| " << m << " | " << lang << " |";
      for (int64_t l : lengths) os << " " << summary(m, l, [&](const NiahCell& c) { return c.lang == lang; }) << " |";
      os << "\n";
    }
  return os.str();
}

}  // namespace hlm
