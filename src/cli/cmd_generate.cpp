// `hybridlm generate MODEL_DIR [--tokenizer FILE|bytes] (--prompt TEXT | --file F | --ids 1,2,3 | --batch F.jsonl)
//  [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop STR]... [--max-memory SIZE]
//  [--block-size N] [--prefill-chunk N] [--max-batch N] [--state-report] [--device cpu|cuda] [--precision fp32|bf16]
//  [--cuda-graphs on|off] [--json]`:
// text generation with the inference engine (infer/): chunked prefill, then batched token-by-token decode over a paged
// KV cache and GDN recurrent state. One request streams its text to stdout as it is produced (statistics to stderr);
// --json prints one object at the end instead; --batch runs every JSONL line as a request, together, and prints one
// JSON line per request in input order.
// --precision: fp32 (the CPU's only one) or bf16 (CUDA's default: weights held once in bf16, bf16 tensor-core GEMMs
// with fp32 accumulation, bf16 KV cache, fp32 GDN state; infer/cuda/cuda_engine.h). The default is bf16 on CUDA, as
// the checkpoints are bf16 and HF serves them in bf16, fp32 on the CPU.
#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "cli/device_option.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "models/json_file.h"
#include "models/model.h"
#include "data/text_io.h"
#include "data/tokenizer.h"
#include "infer/cpu_engine.h"
#include "infer/eos.h"
#include "infer/generate.h"
#include "infer/state_report.h"
#ifdef HLM_WITH_CUDA
#include "backend/cuda/device_query.h"
#include "infer/cuda/cuda_engine.h"
#endif

namespace hlm {
namespace {

struct GenerateCliOptions {
  std::string model_dir, tokenizer, prompt, file, ids, batch, max_memory, device = "cpu";
  std::string precision;  // "", fp32 or bf16 ("": bf16 on cuda, fp32 on cpu)
  std::string cuda_graphs = "on";  // --cuda-graphs on|off (CUDA engine: decode steps as CUDA graphs)
  int64_t max_new_tokens = 64, block_size = kDefaultKvBlockSize, prefill_chunk = 512, max_batch = 64;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool json = false, state_report = false;
  int sources_given = 0;      // of --prompt, --file, --ids, --batch (given, even with an empty value)
  std::string text_source;    // "--prompt" or "--file" when the prompt is text
};

// "123", "64K", "512M", "1.5G" (binary multiples) -> bytes.
int64_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  HLM_CHECK_INPUT(end != text.c_str() && scale > 0 && std::isfinite(value) && value > 0 && value * scale < 9e18,
                  "--max-memory: '", text, "' is not a size (bytes, or a number with K, M or G)");
  return static_cast<int64_t>(value * scale);
}

int64_t half_physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 2 : int64_t{1} << 40;
}

// "1,2,3" or "[1, 2, 3]" -> ids (negative ids are kept: the engine refuses them with the request's message).
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
  std::string body = text;
  for (char& ch : body)
    if (ch == '[' || ch == ']' || ch == ',') ch = ' ';
  std::istringstream in(body);
  std::vector<int32_t> ids;
  std::string item;
  while (in >> item) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    HLM_CHECK_INPUT(end && *end == '\0' && v >= INT32_MIN && v <= INT32_MAX, what, ": '", item,
                    "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), path, ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Length of the longest prefix of s that does not end inside a UTF-8 sequence (so streaming never splits a
// character; a trailing U+FFFD from a partial byte-level token is held back too).
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  if (n >= 3 && s.compare(n - 3, 3, "\xEF\xBF\xBD") == 0) return n - 3;
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead byte
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < len ? n - back : n;
  }
  return n;
}

struct Request {
  nlohmann::json id;
  GenerateRequest gen;
  bool from_text = false;
};

struct Output {  // per request: decoded text so far and stop-string state
  std::vector<int32_t> text_ids;  // generated ids that go into the text (EOS ids excluded)
  std::string text;
  size_t printed = 0;
};

std::vector<Request> read_batch(const std::string& path, const Tokenizer* tok, const GenerateCliOptions& o) {
  std::vector<Request> requests;
  jsonl_file_for_each(path, [&](const nlohmann::json& row, int64_t n) {
    const bool has_prompt = row.is_object() && row.contains("prompt") && row["prompt"].is_string();
    const bool has_ids = row.is_object() && row.contains("ids") && row["ids"].is_array();
    HLM_CHECK_INPUT(has_prompt != has_ids, path, ":", n,
                    ": expected an object with either a string \"prompt\" or a list \"ids\"");
    Request r;
    r.id = row.contains("id") ? row["id"] : nlohmann::json(n);
    r.gen.max_new_tokens = o.max_new_tokens;
    r.gen.sampling = o.sampling;
    if (row.contains("max_new_tokens")) {
      HLM_CHECK_INPUT(row["max_new_tokens"].is_number_integer(), path, ":", n, ": max_new_tokens must be an integer");
      r.gen.max_new_tokens = row["max_new_tokens"].get<int64_t>();
    }
    if (has_prompt) {
      HLM_CHECK_INPUT(tok != nullptr, path, ":", n, ": a text prompt needs --tokenizer");
      r.gen.prompt = tok->encode(row["prompt"].get<std::string>());
      r.from_text = true;
    } else {
      for (const auto& v : row["ids"]) {
        HLM_CHECK_INPUT(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX,
                        path, ":", n, ": ids must be integers, got ", v.dump());
        r.gen.prompt.push_back(v.get<int32_t>());
      }
    }
    requests.push_back(std::move(r));
  });
  HLM_CHECK_INPUT(!requests.empty(), path, ": no requests");
  return requests;
}

nlohmann::json timings_json(const GenerateStats& s) {
  const auto rate = [](int64_t n, double t) { return t > 0 ? n / t : 0.0; };
  return {{"prefill_tokens", s.prefill_tokens},
          {"prefill_seconds", s.prefill_seconds},
          {"prefill_tokens_per_second", rate(s.prefill_tokens, s.prefill_seconds)},
          {"decode_tokens", s.decode_tokens},
          {"decode_steps", s.decode_steps},
          {"decode_seconds", s.decode_seconds},
          {"decode_tokens_per_second", rate(s.decode_tokens, s.decode_seconds)}};
}

int run_generate(const GenerateCliOptions& o) {
  check_device_option(o.device);  // before anything is loaded
  HLM_CHECK_INPUT(o.precision.empty() || o.precision == "fp32" || o.precision == "bf16",
                  "--precision must be fp32 or bf16, got '", o.precision, "'");
  const std::string precision = !o.precision.empty() ? o.precision : (o.device == "cuda" ? "bf16" : "fp32");
  HLM_CHECK_INPUT(precision == "fp32" || o.device == "cuda",
                  "--precision bf16 needs --device cuda (the CPU engine runs fp32 only)");
  const int64_t kv_element_bytes = precision == "bf16" ? 2 : 4;
  HLM_CHECK_INPUT(o.cuda_graphs == "on" || o.cuda_graphs == "off", "--cuda-graphs must be on or off, got '",
                  o.cuda_graphs, "'");
  HLM_CHECK_INPUT(o.sources_given == 1, "generate: give exactly one of --prompt, --file, --ids or --batch");
  HLM_CHECK_INPUT(o.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", o.max_new_tokens);
  HLM_CHECK_INPUT(o.block_size > 0, "--block-size must be positive, got ", o.block_size);
  HLM_CHECK_INPUT(o.prefill_chunk > 0, "--prefill-chunk must be positive, got ", o.prefill_chunk);
  HLM_CHECK_INPUT(o.max_batch > 0, "--max-batch must be positive, got ", o.max_batch);
  sampling_check(o.sampling);
  for (const std::string& s : o.stop) HLM_CHECK_INPUT(!s.empty(), "--stop: an empty stop string");

  check_model_dir(o.model_dir);  // before the tokenizer checks, which would otherwise blame a missing tokenizer.json
  std::unique_ptr<Tokenizer> tok;
  if (!o.tokenizer.empty()) tok = tokenizer_load(o.tokenizer);
  else if (std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json"))
    tok = tokenizer_load((std::filesystem::path(o.model_dir) / "tokenizer.json").string());
  const bool batch_mode = !o.batch.empty();
  HLM_CHECK_INPUT(!batch_mode || o.stop.empty() || tok, "--stop needs a tokenizer");
  HLM_CHECK_INPUT(tok || o.json || batch_mode,
                  "generate: printing text needs a tokenizer (--tokenizer FILE|bytes, or a tokenizer.json in ",
                  o.model_dir, "); with --ids, --json prints the ids without one");
  HLM_CHECK_INPUT(tok || o.stop.empty(), "--stop needs a tokenizer (--tokenizer FILE|bytes)");

  std::vector<Request> requests;
  if (batch_mode) {
    requests = read_batch(o.batch, tok.get(), o);
  } else {
    Request r;
    r.id = 1;
    r.gen.max_new_tokens = o.max_new_tokens;
    r.gen.sampling = o.sampling;
    if (o.text_source.empty()) {
      r.gen.prompt = parse_id_list(o.ids, "--ids");
    } else {
      HLM_CHECK_INPUT(tok, "--prompt/--file need a tokenizer (--tokenizer FILE|bytes)");
      const std::string text = o.text_source == "--file" ? read_file_text(o.file) : o.prompt;
      const size_t bad = utf8_first_invalid(text);
      HLM_CHECK_INPUT(bad == std::string::npos, o.text_source == "--file" ? o.file : o.text_source,
                      ": invalid UTF-8 at byte ", bad);
      r.gen.prompt = tok->encode(text);
      r.from_text = true;
    }
    requests.push_back(std::move(r));
  }

  Model model = Model::load(o.model_dir);
  const ModelConfig& c = model.config();
  // Memory plan: the largest max_batch requests' worst cases at once, cut to --max-memory.
  std::vector<int64_t> blocks;
  const MemoryPlan shape = memory_plan_shape(c, o.block_size, kv_element_bytes);
  for (const Request& r : requests) {
    const auto prompt = static_cast<int64_t>(r.gen.prompt.size());
    if (prompt == 0 || (c.max_position_embeddings > 0 && prompt > c.max_position_embeddings)) continue;  // refused
    blocks.push_back(shape.blocks_for(generate_max_tokens(c, r.gen)));
  }
  if (blocks.empty()) blocks.push_back(1);
  std::sort(blocks.rbegin(), blocks.rend());
  MemoryRequest mr;
  mr.block_size = o.block_size;
  mr.kv_element_bytes = kv_element_bytes;
  mr.max_sequences = std::min<int64_t>(o.max_batch, static_cast<int64_t>(requests.size()));
  mr.kv_blocks = 0;
  // Refused requests (empty, too long) have no entry in `blocks`, so it may be shorter than max_sequences.
  const auto planned = std::min<size_t>(static_cast<size_t>(mr.max_sequences), blocks.size());
  for (size_t i = 0; i < planned; ++i) mr.kv_blocks += blocks[i];
  // Without --max-memory the plan is what the requests need, but at most half the machine's memory: a context that
  // does not fit is then refused with a message instead of failing an allocation.
  mr.budget_bytes = o.max_memory.empty() ? half_physical_memory() : parse_bytes(o.max_memory);
  const MemoryPlan plan = memory_plan_build(c, mr);
#ifdef HLM_WITH_CUDA
  // --device cuda: the weights uploaded once, the state in device memory (infer/cuda/cuda_engine.h). Declared before
  // the engine, so they outlive it.
  std::unique_ptr<CudaContext> cuda_ctx;
  std::unique_ptr<CudaModel> cuda_model;
  if (o.device == "cuda") {
    cuda_ctx = std::make_unique<CudaContext>(0);
    cuda_model = std::make_unique<CudaModel>(CudaModel::upload(model, *cuda_ctx));
    if (precision == "bf16") cuda_model->drop_fp32_weights();  // weights held once, in bf16
  }
  CudaEngineOptions engine_options = cuda_engine_default_options();
  engine_options.cuda_graphs = engine_options.cuda_graphs && o.cuda_graphs == "on";
  std::unique_ptr<InferenceEngine> engine =
      cuda_model ? make_cuda_engine(*cuda_model, plan, engine_options) : make_cpu_engine(model, plan);
#else
  std::unique_ptr<InferenceEngine> engine = make_cpu_engine(model, plan);
#endif

  std::vector<GenerateRequest> gen;
  for (const Request& r : requests) gen.push_back(r.gen);
  // A single request is checked up front: its refusal is the command's error (exit 2).
  if (!batch_mode) {
    const std::string why = generate_refusal(*engine, gen[0]);
    HLM_CHECK_INPUT(why.empty(), "generate: ",
                    why.find("memory plan") == std::string::npos ? why
                    : o.max_memory.empty() ? why + " (capped at half the machine's memory; see --max-memory)"
                                           : why + " (--max-memory " + o.max_memory + ")");
  }

  GenerateOptions go;
  go.eos_ids = eos_token_ids(c, o.model_dir);
  go.prefill_chunk = o.prefill_chunk;
  std::vector<Output> outputs(requests.size());
  const bool stream = !batch_mode && !o.json;
  go.on_token = [&](size_t r, int32_t token) {
    if (!tok) return true;
    Output& out = outputs[r];
    // EOS ids and ids beyond the tokenizer's vocabulary (a model vocab padded past it) are not text.
    if (std::find(go.eos_ids.begin(), go.eos_ids.end(), token) != go.eos_ids.end() || token >= tok->vocab_size())
      return true;
    out.text_ids.push_back(token);
    const size_t before = out.text.size();
    out.text = tok->decode(out.text_ids);
    if (stream) {
      const size_t ready = complete_utf8_prefix(out.text);
      if (ready > out.printed) {
        std::cout << out.text.substr(out.printed, ready - out.printed) << std::flush;
        out.printed = ready;
      }
    }
    size_t longest = 0;
    for (const std::string& s : o.stop) longest = std::max(longest, s.size());
    const size_t from = before > longest ? before - longest : 0;  // a stop string may straddle tokens
    for (const std::string& s : o.stop)
      if (out.text.find(s, from) != std::string::npos) return false;
    return true;
  };

  GenerateStats stats;
  const std::vector<GenerateResult> results = generate(*engine, gen, go, &stats);
  const std::vector<StateReportRow> report = state_report(c, stats.peak_usage);

  const auto result_json = [&](size_t i) {
    nlohmann::json j = {{"id", requests[i].id},
                        {"prompt_tokens", requests[i].gen.prompt.size()},
                        {"ids", results[i].ids},
                        {"finish_reason", finish_reason_name(results[i].finish)}};
    j["text"] = tok ? nlohmann::json(outputs[i].text) : nlohmann::json(nullptr);
    if (!results[i].error.empty()) j["error"] = results[i].error;
    return j;
  };
  const nlohmann::json summary = {{"timings", timings_json(stats)},
                                  {"device", engine->device()},
                                  {"precision", precision},
                                  {"memory_plan",
                                   {{"block_size", plan.block_size},
                                    {"num_blocks", plan.num_blocks},
                                    {"max_sequences", plan.max_sequences},
                                    {"bytes", plan.total_bytes()}}},
                                  {"peak_state", state_report_json(report, stats.peak_usage)}};
  const nlohmann::json& t = summary["timings"];
  const auto stats_line = [&] {
    char line[300];
    std::snprintf(line, sizeof line,
                  "prefill: %lld tokens in %.3f s (%.1f tok/s); decode: %lld tokens in %lld steps, %.3f s (%.1f "
                  "tok/s); state at peak %lld bytes in use of a %lld-byte plan\n",
                  static_cast<long long>(stats.prefill_tokens), stats.prefill_seconds,
                  t["prefill_tokens_per_second"].get<double>(), static_cast<long long>(stats.decode_tokens),
                  static_cast<long long>(stats.decode_steps), stats.decode_seconds,
                  t["decode_tokens_per_second"].get<double>(), static_cast<long long>(stats.peak_state_bytes),
                  static_cast<long long>(plan.total_bytes()));
    return std::string(line);
  };
  size_t refused = 0;
  for (const GenerateResult& r : results) refused += r.finish == FinishReason::Refused;

  if (o.json) {
    nlohmann::json j = summary;
    if (batch_mode) {
      j["results"] = nlohmann::json::array();
      for (size_t i = 0; i < results.size(); ++i) j["results"].push_back(result_json(i));
    } else {
      j.update(result_json(0));
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (batch_mode) {
    for (size_t i = 0; i < results.size(); ++i)
      std::cout << result_json(i).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    const Output& out = outputs[0];
    if (out.printed < out.text.size()) std::cout << out.text.substr(out.printed);
    std::cout << "\n" << std::flush;
    std::cerr << "finish: " << finish_reason_name(results[0].finish) << ", " << results[0].ids.size()
              << " new tokens\n";
  }
  if (!o.json) std::cerr << stats_line();
  if (o.state_report) std::cerr << state_report_text(report, stats.peak_usage);
  if (refused > 0) {
    for (size_t i = 0; i < results.size(); ++i)
      if (results[i].finish == FinishReason::Refused)
        std::cerr << "error: request " << requests[i].id.dump() << " refused: " << results[i].error << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, std::function<int()>& action) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("generate", "Generate text: chunked prefill, batched decode (KV cache + GDN state)");
  cmd->footer(
      "Greedy at --temperature 0 (the default). Stops at an EOS id (config.json and generation_config.json), after\n"
      "--max-new-tokens, at a --stop string (kept in the text), or at max_position_embeddings. One request streams\n"
      "its text to stdout and statistics to stderr; --json prints one object (ids = generated ids only). --batch\n"
      "reads JSONL ({\"prompt\": TEXT} or {\"ids\": [..]}, optional \"id\", \"max_new_tokens\") and decodes the\n"
      "requests together, printing one JSON line per request; a refused request gets an \"error\" and exit code 2.\n"
      "--max-memory caps the inference state (KV blocks + GDN / Mamba-2 state; not the weights). Models with\n"
      "Mamba-2 layers (granitemoehybrid) run on --device cpu only. --precision: fp32 or bf16\n"
      "(CUDA only; the default on CUDA: bf16 weights, GEMMs and KV cache, fp32 GDN state). docs/inference.md.\n"
      "Examples:\n"
      "  hybridlm generate models/qwen3-0.6b --prompt 'The capital of France is' --max-new-tokens 32\n"
      "  hybridlm generate runs/student --tokenizer bytes --prompt 'Once upon' --temperature 0.8 --top-p 0.9 --seed 1\n"
      "  hybridlm generate runs/student --ids 1,2,3 --max-new-tokens 8 --json\n"
      "  hybridlm generate tests/golden/granitemoehybrid_tiny --ids 1,2,3 --max-new-tokens 8 --state-report --json\n"
      "  hybridlm generate models/qwen3-0.6b --device cuda --precision fp32 --prompt 'Hello' --max-new-tokens 16\n"
      "  hybridlm generate models/qwen3-0.6b --device cuda --cuda-graphs off --prompt 'Hello' --max-new-tokens 16\n"
      "  hybridlm generate runs/student --tokenizer bytes --batch prompts.jsonl --max-memory 256M --state-report");
  cmd->add_option("model_dir", o->model_dir, "HF model directory (config.json + safetensors)")->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json file or 'bytes' (default: MODEL_DIR/tokenizer.json when present)");
  cmd->add_option("--prompt", o->prompt, "Prompt text");
  cmd->add_option("--file", o->file, "Read the prompt text from a file");
  cmd->add_option("--ids", o->ids, "Prompt token ids, 1,2,3 or [1,2,3]");
  cmd->add_option("--batch", o->batch, "JSONL file of requests, generated together");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate at most (default 64)");
  cmd->add_option("--temperature", o->sampling.temperature, "Sampling temperature; 0 = greedy (default)");
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus: keep the most likely tokens up to this mass (1 = all)");
  cmd->add_option("--seed", o->sampling.seed, "Seed of the counter-based sampler (default 0)");
  cmd->add_option("--stop", o->stop, "Stop when the text contains this string (repeatable)");
  cmd->add_option("--max-memory", o->max_memory, "Budget for the inference state, e.g. 512M or 2G (default: what "
                                                  "the requests need, at most half the machine's memory)");
  cmd->add_option("--block-size", o->block_size, "KV cache block size in tokens (default 16)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk,
                  "Prompt tokens per prefill step, over the prompts admitted together (default 512)");
  cmd->add_option("--max-batch", o->max_batch, "Sequences decoded together at most (default 64)");
  cmd->add_flag("--state-report", o->state_report,
                "Print the state bytes per layer at the peak, measured and by Table 1's arithmetic (stderr)");
  cmd->add_option("--device", o->device, "cpu (default) or cuda (the CUDA inference engine)");
  cmd->add_option("--precision", o->precision,
                  "fp32 or bf16 (bf16: CUDA only, its default; fp32: the CPU's only precision)");
  cmd->add_option("--cuda-graphs", o->cuda_graphs,
                  "on (default) or off: --device cuda replays each decode step's shape as a CUDA graph "
                  "(docs/inference.md); off runs every step eagerly (same results)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object (ids, text, finish_reason, timings, peak state)");
  cmd->callback([o, cmd, &action] {
    o->sources_given = 0;
    for (const char* name : {"--prompt", "--file", "--ids", "--batch"})
      if (cmd->get_option(name)->count() > 0) {
        ++o->sources_given;
        if (std::string(name) == "--prompt" || std::string(name) == "--file") o->text_source = name;
      }
    action = [o] { return run_generate(*o); };
  });
}

}  // namespace hlm
