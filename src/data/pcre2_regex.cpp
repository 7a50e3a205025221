#include "data/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "data/unicode_text.h"

namespace hlm {
namespace {

constexpr std::string_view kOnigSpaceSet = "\\t-\\r\\x{85}\\p{Z}";

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Per-thread match data (one ovector pair: only the whole match is read) and a JIT stack that grows to 8 MiB, so
// long runs of whitespace or letters never hit PCRE2's 32 KiB default.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string hf_regex_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kOnigSpaceSet) : "[" + std::string(kOnigSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kOnigSpaceSet) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Pcre2Regex::Pcre2Regex(std::string_view pattern, const std::string& what) : what_(what) {
  const std::string translated = hf_regex_to_pcre2(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw_input_error(what, ": regex ", std::string(pattern), " does not compile: ",
                      reinterpret_cast<const char*>(message), " (at offset ", error_offset, " of ", translated, ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(as_code(code_)); }

void Pcre2Regex::find_all(std::string_view text, std::vector<RegexMatch>& out) const {
  ThreadMatchState& state = thread_match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The subject is valid UTF-8 (checked once by the caller), so PCRE2's own check is skipped.
    const int rc = jit_ ? pcre2_jit_match(as_code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                                          state.context)
                        : pcre2_match(as_code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                                      state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw_input_error(what_, ": regex match failed: ", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      out.push_back({begin, end});
      start = end;
    } else {
      start = begin + utf8_sequence_length(static_cast<unsigned char>(text[begin < text.size() ? begin : 0]));
    }
  }
}

}  // namespace hlm
