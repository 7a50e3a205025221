// UTF-8 validation (Unicode 15, Table 3-7 "Well-Formed UTF-8 Byte Sequences") and streaming zstd line reading
// (the loop of zstd's examples/streaming_decompression.c: a frame is complete when ZSTD_decompressStream returns 0).
#include "data/text_io.h"

#include <zstd.h>

#include <fstream>
#include <memory>
#include <vector>

#include "core/error.h"

namespace hlm {
namespace fs = std::filesystem;

size_t utf8_first_invalid(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
      if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string zstd_compress(std::string_view bytes, int level) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), level);
  HLM_CHECK(!ZSTD_isError(n), "zstd compression failed: ", ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

namespace {

// Splits decompressed text into lines; keeps the unfinished tail between calls.
class LineSplitter {
 public:
  explicit LineSplitter(const std::function<void(std::string_view, int64_t)>& on_line) : on_line_(on_line) {}
  void feed(std::string_view bytes) {
    size_t start = 0;
    for (size_t nl = bytes.find('\n'); nl != std::string_view::npos; nl = bytes.find('\n', start)) {
      if (pending_.empty()) {
        on_line_(bytes.substr(start, nl - start), ++line_);
      } else {
        pending_.append(bytes.substr(start, nl - start));
        on_line_(pending_, ++line_);
        pending_.clear();
      }
      start = nl + 1;
    }
    pending_.append(bytes.substr(start));
  }
  void finish() {
    if (!pending_.empty()) on_line_(pending_, ++line_);
    pending_.clear();
  }

 private:
  const std::function<void(std::string_view, int64_t)>& on_line_;
  std::string pending_;
  int64_t line_ = 0;
};

std::ifstream open_input(const fs::path& path) {
  HLM_CHECK_INPUT(fs::exists(path), path.string(), ": no such file");
  HLM_CHECK_INPUT(!fs::is_directory(path), path.string(), ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), path.string(), ": cannot open for reading");
  return in;
}

struct DStreamFree {
  void operator()(ZSTD_DStream* d) const { ZSTD_freeDStream(d); }
};

}  // namespace

void zstd_for_each_line(const fs::path& path, const std::function<void(std::string_view, int64_t)>& on_line,
                        const std::function<void(std::string_view)>& on_chunk) {
  std::ifstream in = open_input(path);
  std::unique_ptr<ZSTD_DStream, DStreamFree> ds(ZSTD_createDStream());
  HLM_CHECK(ds != nullptr, "ZSTD_createDStream failed");
  std::vector<char> in_buf(ZSTD_DStreamInSize()), out_buf(ZSTD_DStreamOutSize());
  LineSplitter lines(on_line);
  size_t last = 1;  // ZSTD_decompressStream's last result: 0 = the frame is complete and flushed
  bool any_input = false;
  while (in) {
    in.read(in_buf.data(), static_cast<std::streamsize>(in_buf.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    any_input = true;
    if (on_chunk) on_chunk(std::string_view(in_buf.data(), got));
    ZSTD_inBuffer input{in_buf.data(), got, 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{out_buf.data(), out_buf.size(), 0};
      last = ZSTD_decompressStream(ds.get(), &output, &input);
      HLM_CHECK_INPUT(!ZSTD_isError(last), path.string(), ": corrupt zstd data (", ZSTD_getErrorName(last), ")");
      lines.feed(std::string_view(out_buf.data(), output.pos));
    }
  }
  HLM_CHECK_INPUT(!in.bad(), path.string(), ": read error");
  HLM_CHECK_INPUT(any_input, path.string(), ": empty file, expected zstd data");
  HLM_CHECK_INPUT(last == 0, path.string(), ": truncated zstd data (the file ends inside a frame)");
  lines.finish();
}

void text_for_each_line(const fs::path& path, const std::function<void(std::string_view, int64_t)>& on_line) {
  std::ifstream in = open_input(path);
  LineSplitter lines(on_line);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    lines.feed(std::string_view(buf.data(), got));
  }
  HLM_CHECK_INPUT(!in.bad(), path.string(), ": read error");
  lines.finish();
}

}  // namespace hlm
