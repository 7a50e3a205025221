// safetensors reader (mmap + full header validation) and atomic writer; contracts in safetensors.h.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hlm {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; so is every host we build for");

// Owns the read-only mapping; tensor views share it through their owner pointer.
struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t s) : addr(a), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(addr, size); }
  const std::byte* bytes() const { return static_cast<const std::byte*>(addr); }
};

namespace {

using json = nlohmann::json;

std::string errno_text() { return std::strerror(errno); }

// Rejects duplicate keys at any depth: nlohmann keeps the last one silently, which would hide a corrupt header.
json parse_header_json(const std::string& src, std::string_view text) {
  std::vector<std::set<std::string>> open_objects;
  auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      HLM_CHECK_INPUT(open_objects.back().insert(key).second, src, ": duplicate key '", key, "' in the header");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    throw_input_error(src, ": header is not valid JSON: ", e.what());
  }
}

// Reads a JSON integer that must be >= 0; `what` names it in errors (already prefixed with file/tensor).
uint64_t read_unsigned(const json& v, const std::string& ctx, std::string_view what) {
  HLM_CHECK_INPUT(v.is_number_integer(), ctx, what, " must be integers, got ", v.dump());
  HLM_CHECK_INPUT(v.is_number_unsigned(), ctx, what, " must be non-negative, got ", v.dump());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& src, const std::string& name, const json& v, uint64_t data_size) {
  const std::string ctx = str_cat(src, ": tensor '", name, "': ");
  HLM_CHECK_INPUT(v.is_object(), ctx, "entry is not a JSON object, got ", v.type_name());
  for (const auto& [key, _] : v.items())
    HLM_CHECK_INPUT(key == "dtype" || key == "shape" || key == "data_offsets", ctx, "unknown key '", key, "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    HLM_CHECK_INPUT(v.contains(key), ctx, "missing '", key, "'");

  SafetensorsEntry e;
  e.name = name;
  const json& dtype = v["dtype"];
  HLM_CHECK_INPUT(dtype.is_string(), ctx, "'dtype' must be a string, got ", dtype.dump());
  const auto code = dtype.get<std::string>();
  const auto parsed = dtype_from_safetensors(code);
  HLM_CHECK_INPUT(parsed.has_value(), ctx, "unsupported dtype '", code, "'");
  e.dtype = *parsed;

  const json& shape = v["shape"];
  HLM_CHECK_INPUT(shape.is_array(), ctx, "'shape' must be an array, got ", shape.dump());
  HLM_CHECK_INPUT(shape.size() <= static_cast<size_t>(kMaxRank), ctx, "rank ", shape.size(), " exceeds the maximum ",
                  kMaxRank);
  std::vector<int64_t> dims;
  uint64_t numel = 1;
  for (const json& d : shape) {
    const uint64_t dim = read_unsigned(d, ctx, "'shape' dimensions");
    HLM_CHECK_INPUT(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), ctx, "dimension ", dim,
                    " is too large");
    HLM_CHECK_INPUT(!__builtin_mul_overflow(numel, dim, &numel), ctx, "shape ", shape.dump(), " overflows");
    dims.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected_bytes = 0;
  HLM_CHECK_INPUT(!__builtin_mul_overflow(numel, dtype_size(e.dtype), &expected_bytes) &&
                      numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                  ctx, "shape ", shape.dump(), " overflows");
  e.shape = Shape(std::span<const int64_t>(dims));

  const json& offsets = v["data_offsets"];
  HLM_CHECK_INPUT(offsets.is_array() && offsets.size() == 2, ctx, "'data_offsets' must be [begin, end], got ",
                  offsets.dump());
  e.begin = read_unsigned(offsets[0], ctx, "'data_offsets'");
  e.end = read_unsigned(offsets[1], ctx, "'data_offsets'");
  const std::string range = str_cat("data_offsets [", e.begin, ", ", e.end, "]");
  HLM_CHECK_INPUT(e.begin <= e.end, ctx, range, " has begin > end");
  HLM_CHECK_INPUT(e.end <= data_size, ctx, range, " end beyond the data section (", data_size, " bytes)");
  HLM_CHECK_INPUT(e.nbytes() == expected_bytes, ctx, range, " hold ", e.nbytes(), " bytes but ", dtype_name(e.dtype),
                  " ", e.shape.str(), " needs ", expected_bytes);
  return e;
}

// Writes all of [data, data+n) to fd, retrying short writes and EINTR.
void write_all(int fd, const void* data, size_t n, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    HLM_CHECK_INPUT(w > 0, path.string(), ": write failed: ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Temp file in the target's directory -> body(fd) -> fsync -> rename. On failure the temp file is unlinked.
void write_atomic_with(const std::filesystem::path& path, const std::function<void(int)>& body) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path tmp = path;
  tmp += str_cat(".tmp.", ::getpid(), ".", counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  HLM_CHECK_INPUT(fd >= 0, path.string(), ": cannot create temporary file ", tmp.string(), ": ", errno_text());
  try {
    body(fd);
    HLM_CHECK_INPUT(::fsync(fd) == 0, path.string(), ": fsync failed: ", errno_text());
    const int rc = ::close(fd);
    fd = -1;
    HLM_CHECK_INPUT(rc == 0, path.string(), ": close failed: ", errno_text());
    HLM_CHECK_INPUT(::rename(tmp.c_str(), path.c_str()) == 0, path.string(), ": rename from ", tmp.string(),
                    " failed: ", errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Persist the rename itself; best effort, as some filesystems refuse fsync on directories.
  const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string src = path.string();
  SafetensorsFile f;
  f.path_ = path;

  struct Fd {  // closes on every exit; the mapping stays valid without the descriptor
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  HLM_CHECK_INPUT(file.fd >= 0, src, ": cannot open: ", errno_text());
  struct stat st {};
  HLM_CHECK_INPUT(::fstat(file.fd, &st) == 0, src, ": cannot stat: ", errno_text());
  HLM_CHECK_INPUT(S_ISREG(st.st_mode), src, ": not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  HLM_CHECK_INPUT(file_size >= 8, src, ": file is ", file_size, " bytes, shorter than the 8-byte header length");
  void* addr = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  HLM_CHECK_INPUT(addr != MAP_FAILED, src, ": mmap failed: ", errno_text());
  f.mapping_ = std::make_shared<Mapping>(addr, file_size);

  uint64_t header_len = 0;
  std::memcpy(&header_len, f.mapping_->bytes(), 8);
  HLM_CHECK_INPUT(header_len <= kSafetensorsMaxHeaderBytes, src, ": header length ", header_len,
                  " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  HLM_CHECK_INPUT(8 + header_len <= file_size, src, ": header length ", header_len,
                  " runs beyond the end of the file (", file_size, " bytes)");
  f.data_begin_ = 8 + header_len;
  const uint64_t data_size = file_size - f.data_begin_;

  const std::string_view text(reinterpret_cast<const char*>(f.mapping_->bytes()) + 8, header_len);
  const json header = parse_header_json(src, text);
  HLM_CHECK_INPUT(header.is_object(), src, ": header is not a JSON object, got ", header.type_name());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      HLM_CHECK_INPUT(value.is_object(), src, ": __metadata__ must be an object, got ", value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        HLM_CHECK_INPUT(mv.is_string(), src, ": __metadata__ value of '", mk, "' must be a string, got ", mv.dump());
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parse_entry(src, key, value, data_size));
  }

  std::sort(f.entries_.begin(), f.entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // Sorted by begin, a non-empty range overlaps an earlier one iff it starts before the furthest end seen so far.
  const SafetensorsEntry* furthest = nullptr;
  for (const auto& e : f.entries_) {
    if (e.nbytes() == 0) continue;  // empty ranges hold no bytes, so they cannot overlap
    if (furthest != nullptr)
      HLM_CHECK_INPUT(e.begin >= furthest->end, src, ": tensors '", furthest->name, "' [", furthest->begin, ", ",
                      furthest->end, "] and '", e.name, "' [", e.begin, ", ", e.end, "] overlap");
    if (furthest == nullptr || e.end > furthest->end) furthest = &e;
  }
  for (size_t i = 0; i < f.entries_.size(); ++i) f.by_name_.emplace(f.entries_[i].name, i);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry_or_throw(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  HLM_CHECK_INPUT(e != nullptr, path_.string(), ": no tensor '", name, "'");
  return *e;
}

std::span<const std::byte> SafetensorsFile::data_section() const {
  return {mapping_->bytes() + data_begin_, mapping_->size - data_begin_};
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry& e = entry_or_throw(name);
  const std::byte* p = data_section().data() + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) == 0) {
    // const_cast: Tensor has no const view type; the pages are PROT_READ, so a stray write faults rather than corrupts.
    return Tensor::wrap(std::const_pointer_cast<Mapping>(mapping_), const_cast<std::byte*>(p), e.shape, e.dtype);
  }
  Tensor copy = Tensor::zeros(e.shape, e.dtype);
  std::memcpy(copy.raw(), p, e.nbytes());
  return copy;
}

Tensor SafetensorsFile::tensor_f32(std::string_view name) const {
  const SafetensorsEntry& e = entry_or_throw(name);
  switch (e.dtype) {
    case DType::F32:
      return tensor(name);
    case DType::BF16:
    case DType::F16:
      return tensor(name).to(DType::F32);
    default:
      throw_input_error(path_.string(), ": tensor '", name, "': stored as ", dtype_name(e.dtype),
                        ", which does not convert to f32");
  }
}

void file_write_atomic(const std::filesystem::path& path, std::string_view bytes) {
  write_atomic_with(path, [&](int fd) { write_all(fd, bytes.data(), bytes.size(), path); });
}

void safetensors_write(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string dst = path.string();
  // Validate everything and build the header before creating any file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  std::vector<Tensor> packed;  // contiguous, in the given order
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HLM_CHECK_INPUT(name != "__metadata__", dst, ": '__metadata__' is reserved and cannot name a tensor");
    HLM_CHECK_INPUT(seen.insert(name).second, dst, ": duplicate tensor name '", name, "'");
    HLM_CHECK_INPUT(t.defined(), dst, ": tensor '", name, "' is undefined");
    packed.push_back(t.contiguous());
    auto shape = nlohmann::ordered_json::array();
    for (int64_t d : t.shape().dims()) shape.push_back(d);
    const uint64_t nbytes = t.nbytes();
    header[name] = {{"dtype", std::string(dtype_info(t.dtype()).safetensors_name)},
                    {"shape", shape},
                    {"data_offsets", nlohmann::ordered_json::array({offset, offset + nbytes})}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(dst, ": cannot encode the header (names and metadata must be UTF-8): ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  HLM_CHECK_INPUT(text.size() <= kSafetensorsMaxHeaderBytes, dst, ": header of ", text.size(),
                  " bytes exceeds the limit of ", kSafetensorsMaxHeaderBytes);

  write_atomic_with(path, [&](int fd) {
    const uint64_t len = text.size();
    write_all(fd, &len, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const Tensor& t : packed) write_all(fd, t.raw(), t.nbytes(), path);
  });
}

}  // namespace hlm
