// Fuzz target: one safetensors file (u64 header length, JSON header, data section) through SafetensorsFile::open
// (which validates the whole header) and then every tensor it lists, in its stored dtype and as f32. Each byte of
// each tensor is read, so a view past the mapping is an AddressSanitizer report.
#include "fuzz_target.h"
#include "core/error.h"
#include "models/safetensors.h"

HLM_FUZZ_TARGET(safetensors) {
  const hlm::SafetensorsFile file = hlm::SafetensorsFile::open(hlm::fuzz::write_scratch("model.safetensors", input));
  unsigned sum = 0;
  for (const hlm::SafetensorsEntry& e : file.entries()) {
    const hlm::Tensor t = file.tensor(e.name);
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) sum += bytes[i];
    try {
      const hlm::Tensor f = file.tensor_f32(e.name);  // integer dtypes are an input error, the others convert
      sum += f.numel() > 0 ? static_cast<unsigned>(f.f32()[f.numel() - 1] != 0) : 0u;
    } catch (const hlm::Error& err) {
      if (err.kind() != hlm::ErrorKind::Input) throw;
    }
  }
  for (const auto& [key, value] : file.metadata()) sum += static_cast<unsigned>(key.size() + value.size());
  hlm::fuzz::keep(static_cast<uint64_t>(sum));
}
