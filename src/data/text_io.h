// Byte-level text helpers for the corpus: UTF-8 validation and zstd (de)compression of line-oriented files.
// Decompression streams (bounded memory besides the current line); compression builds the whole frame in memory
// (corpus files are tens of MB). Errors are input errors that name the file; callers add the line context.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace hlm {

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms, surrogates and
// code points above U+10FFFF are ill-formed), or npos when all of `text` is valid.
size_t utf8_first_invalid(std::string_view text);

// One zstd frame holding `bytes` (level: 1..19).
std::string zstd_compress(std::string_view bytes, int level = 6);

// Streams a zstd-compressed file and calls on_line(line, line_number) for each '\n'-terminated line (the newline
// removed; a last line without newline counts too; line numbers start at 1). on_chunk, when set, sees every
// compressed byte read (for checksums). Input errors: missing file, empty file, corrupt or truncated zstd data.
void zstd_for_each_line(const std::filesystem::path& path,
                        const std::function<void(std::string_view line, int64_t line_number)>& on_line,
                        const std::function<void(std::string_view compressed)>& on_chunk = {});

// Same for an uncompressed text file.
void text_for_each_line(const std::filesystem::path& path,
                        const std::function<void(std::string_view line, int64_t line_number)>& on_line);

}  // namespace hlm
