// `hybridlm corpus import --out DIR --lang CODE=PATH [...] [--tier CODE=TIER ...] [--format jsonl|text] [--force]`
// builds a corpus directory (data/corpus.h) from JSONL files (a "text" field per line) or plain text files (one
// document per blank-line-separated block); inputs ending in .zst are decompressed on the fly. Several --lang options
// may name the same code: their documents are concatenated in the given order. Empty documents are skipped and
// counted. --sources FILE records provenance in corpus.json (packages with versions, text bytes per source and
// language; data/corpus_provenance.h), as `make corpus` does. `hybridlm corpus info DIR [--verify] [--json]` prints
// languages, tiers, documents and bytes, and the packages when recorded.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/subcommands.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/text_io.h"

namespace hlm {
namespace {

namespace fs = std::filesystem;

struct CorpusImportOptions {
  std::string out;
  std::vector<std::string> langs;
  std::vector<std::string> tiers;
  std::string format = "jsonl";
  std::string sources;  // provenance file (optional)
  bool force = false;
};

struct CorpusInfoOptions {
  std::string dir;
  bool verify = false;
  bool json = false;
};

std::pair<std::string, std::string> split_assignment(const std::string& arg, const char* flag) {
  const size_t eq = arg.find('=');
  HLM_CHECK_INPUT(eq != std::string::npos && eq > 0 && eq + 1 < arg.size(), flag, " '", arg,
                  "': expected CODE=VALUE, e.g. fra_Latn=fra.jsonl");
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

void for_each_line(const fs::path& path, const std::function<void(std::string_view, int64_t)>& on_line) {
  if (path.extension() == ".zst") {
    zstd_for_each_line(path, on_line);
  } else {
    text_for_each_line(path, on_line);
  }
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos; }

// Appends the documents of one input file; returns the number of empty documents skipped.
int64_t read_input(const fs::path& path, const std::string& format, std::vector<std::string>& docs) {
  const std::string where = path.string();
  int64_t empty = 0;
  std::string block;  // text format: the paragraph block being collected
  auto flush_block = [&] {
    if (!block.empty()) docs.push_back(std::move(block));
    block.clear();
  };
  for_each_line(path, [&](std::string_view line, int64_t n) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t bad = utf8_first_invalid(line);
    HLM_CHECK_INPUT(bad == std::string_view::npos, where, ": line ", n, ": invalid UTF-8 at byte ", bad);
    if (format == "text") {
      if (blank(line)) return flush_block();
      if (!block.empty()) block += '\n';
      block.append(line);
      return;
    }
    if (blank(line)) return;  // JSONL: blank lines carry no document
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw_input_error(where, ": line ", n, ": invalid JSON (", e.what(), ")");
    }
    HLM_CHECK_INPUT(doc.is_object() && doc.contains("text") && doc["text"].is_string(), where, ": line ", n,
                    ": missing \"text\" string field");
    std::string text = doc["text"].get<std::string>();
    if (text.empty()) {
      ++empty;
    } else {
      docs.push_back(std::move(text));
    }
  });
  flush_block();
  return empty;
}

void print_languages(const std::vector<CorpusLanguage>& langs) {
  int64_t docs = 0, bytes = 0;
  std::printf("  %-10s %-7s %12s %14s  %s\n", "code", "tier", "documents", "bytes", "file");
  for (const CorpusLanguage& l : langs) {
    std::printf("  %-10s %-7s %12lld %14lld  %s\n", l.code.c_str(), l.tier.c_str(), static_cast<long long>(l.documents),
                static_cast<long long>(l.bytes), l.file.c_str());
    docs += l.documents;
    bytes += std::max<int64_t>(l.bytes, 0);
  }
  std::printf("  %-10s %-7s %12lld %14lld\n", "total", "", static_cast<long long>(docs),
              static_cast<long long>(bytes));
}

void print_provenance(const CorpusProvenance& p) {
  if (!p.packages.empty()) {
    int64_t bytes = 0;
    for (const CorpusPackage& pkg : p.packages) bytes += pkg.bytes;
    std::printf("packages (%zu, %.1f MB downloaded):", p.packages.size(), static_cast<double>(bytes) / 1e6);
    for (const CorpusPackage& pkg : p.packages) std::printf(" %s=%s", pkg.name.c_str(), pkg.version.c_str());
    std::printf("\n");
  }
  if (!p.left_out.empty()) {
    std::printf("left out:");
    for (const auto& [code, bytes] : p.left_out)
      std::printf(" %s (%lld bytes)", code.c_str(), static_cast<long long>(bytes));
    std::printf("\n");
  }
}

int run_import(const CorpusImportOptions& o) {
  const fs::path out(o.out);
  HLM_CHECK_INPUT(o.force || !fs::exists(out / "corpus.json"), out.string(),
                  ": already holds a corpus (corpus.json); use --force to overwrite");
  std::vector<std::string> order;  // codes in first-seen order
  std::map<std::string, std::vector<std::string>> docs;
  std::map<std::string, std::string> tiers;
  std::vector<std::string> sources;
  for (const std::string& arg : o.langs) {
    auto [code, path] = split_assignment(arg, "--lang");
    if (std::find(order.begin(), order.end(), code) == order.end()) order.push_back(code);
    HLM_CHECK_INPUT(fs::is_regular_file(path), "--lang ", arg, ": ", path, ": no such file");
    sources.push_back(code + "=" + path + " (" + o.format + ")");
  }
  for (const std::string& arg : o.tiers) {
    auto [code, tier] = split_assignment(arg, "--tier");
    HLM_CHECK_INPUT(std::find(order.begin(), order.end(), code) != order.end(), "--tier ", arg, ": language ", code,
                    " has no --lang");
    corpus_tier_index(tier);
    tiers[code] = tier;
  }
  const CorpusProvenance provenance = o.sources.empty() ? CorpusProvenance{} : corpus_provenance_load(o.sources);
  int64_t empty = 0;
  for (const std::string& arg : o.langs) {
    auto [code, path] = split_assignment(arg, "--lang");
    empty += read_input(path, o.format, docs[code]);
  }
  std::vector<CorpusLanguage> langs;
  std::vector<std::vector<std::string>> texts;
  for (const std::string& code : order) {
    CorpusLanguage lang;
    lang.code = code;
    lang.tier = tiers.count(code) ? tiers[code] : (code == "eng_Latn" ? "anchor" : "mid");
    langs.push_back(lang);
    texts.push_back(std::move(docs[code]));
  }
  corpus_write(out, langs, texts, sources, provenance);
  const Corpus corpus = Corpus::open(out);
  std::printf("wrote corpus %s (%zu languages; %lld empty documents skipped)\n", out.string().c_str(),
              corpus.languages().size(), static_cast<long long>(empty));
  print_languages(corpus.languages());
  return 0;
}

int run_info(const CorpusInfoOptions& o) {
  const Corpus corpus = Corpus::open(o.dir);
  nlohmann::ordered_json verified = nlohmann::ordered_json::object();
  if (o.verify) {
    for (const CorpusLanguage& l : corpus.languages()) {
      const CorpusDocuments d = corpus.read_documents(l.code);
      verified[l.code] = {{"documents", d.texts.size()}, {"empty", d.skipped_empty}};
    }
  }
  if (o.json) {
    nlohmann::ordered_json j = {{"dir", o.dir}, {"languages", nlohmann::ordered_json::array()}};
    for (const CorpusLanguage& l : corpus.languages())
      j["languages"].push_back(
          {{"code", l.code}, {"tier", l.tier}, {"documents", l.documents}, {"bytes", l.bytes}, {"file", l.file}});
    corpus_provenance_to_json(corpus.provenance(), j);
    if (o.verify) j["verified"] = verified;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("corpus %s: %zu languages\n", o.dir.c_str(), corpus.languages().size());
  print_languages(corpus.languages());
  std::map<std::string, int> per_tier;
  for (const CorpusLanguage& l : corpus.languages()) ++per_tier[l.tier];
  std::printf("tiers:");
  for (const char* t : {"anchor", "high", "mid", "low"}) std::printf(" %s %d", t, per_tier[t]);
  std::printf("\n");
  print_provenance(corpus.provenance());
  if (o.verify) {
    int64_t empty = 0;
    for (const auto& [code, v] : verified.items()) empty += v["empty"].get<int64_t>();
    std::printf("verified: every file decompresses, parses and matches corpus.json (%lld empty documents)\n",
                static_cast<long long>(empty));
  }
  return 0;
}

}  // namespace

void add_corpus_command(CLI::App& app, std::function<int()>& action) {
  CLI::App* cmd = app.add_subcommand("corpus", "Build and inspect training corpora (one .jsonl.zst per language)");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  hybridlm corpus import --out corpus --lang eng_Latn=en.jsonl --lang fra_Latn=fr.jsonl --tier fra_Latn=high\n"
      "  hybridlm corpus import --out corpus --format text --lang hin_Deva=hi.txt --lang hin_Deva=hi-more.txt.zst\n"
      "  hybridlm corpus info corpus --verify");

  auto imp = std::make_shared<CorpusImportOptions>();
  CLI::App* import_cmd = cmd->add_subcommand("import", "Write a corpus directory from JSONL or text files");
  import_cmd->footer(
      "Tiers set the mixture shares (anchor, high, mid, low; seed App. C.1): eng_Latn defaults to anchor, every\n"
      "other language to mid. jsonl: one {\"text\": ...} object per line (blank lines ignored). text: one document\n"
      "per block of lines separated by blank lines. Inputs ending in .zst are decompressed.\n"
      "Examples:\n"
      "  hybridlm corpus import --out corpus --lang eng_Latn=en.jsonl --lang fra_Latn=fr.jsonl --tier fra_Latn=high\n"
      "  hybridlm corpus import --out corpus --format text --lang hin_Deva=hi.txt --lang hin_Deva=hi2.txt\n"
      "  hybridlm corpus import --out corpus --lang fra_Latn=fr.jsonl --sources sources.json");
  import_cmd->add_option("--out", imp->out, "Corpus directory to write")->required();
  import_cmd->add_option("--lang", imp->langs, "CODE=PATH: documents of a language (repeatable, FineWeb-2 codes)")
      ->required();
  import_cmd->add_option("--tier", imp->tiers, "CODE=anchor|high|mid|low (repeatable)");
  import_cmd->add_option("--format", imp->format, "Input format: jsonl or text")
      ->check(CLI::IsMember({"jsonl", "text"}));
  import_cmd->add_option("--sources", imp->sources,
                         "JSON file recorded in corpus.json: packages with versions, text bytes per source and "
                         "language, languages left out (written by make corpus)");
  import_cmd->add_flag("--force", imp->force, "Overwrite a corpus already in --out");
  import_cmd->callback([imp, &action] { action = [imp] { return run_import(*imp); }; });

  auto info = std::make_shared<CorpusInfoOptions>();
  CLI::App* info_cmd = cmd->add_subcommand("info", "Print a corpus's languages, tiers, documents and bytes");
  info_cmd->footer(
      "Examples:\n"
      "  hybridlm corpus info corpus\n"
      "  hybridlm corpus info corpus --verify --json");
  info_cmd->add_option("dir", info->dir, "Corpus directory")->required();
  info_cmd->add_flag("--verify", info->verify, "Read every document (zstd, JSON, UTF-8, counts, sha256)");
  info_cmd->add_flag("--json", info->json, "Print JSON instead of a table");
  info_cmd->callback([info, &action] { action = [info] { return run_info(*info); }; });
}

}  // namespace hlm
