#include "models/architecture.h"

#include <array>

#include "core/error.h"

namespace hlm {

static const std::array<const ArchitectureSpec*, 13> kArchitectures{
    &kQwen3Spec,  &kGraniteSpec,  &kOlmoHybridSpec, &kQwen3HybridSpec, &kQwen3MoeSpec,        &kQwen35Spec,
    &kQwen35MoeSpec, &kOlmo3Spec, &kCohere2Spec,    &kQwen3NextSpec,   &kGraniteMoeHybridSpec,
    &kGraniteHybridSpec, &kBailingMoeLinearSpec};

std::span<const ArchitectureSpec* const> architecture_specs() { return kArchitectures; }

const ArchitectureSpec& architecture_spec(Architecture architecture) {
  for (const ArchitectureSpec* spec : kArchitectures)
    if (spec->architecture == architecture) return *spec;
  throw_internal_error("no ArchitectureSpec for architecture ", static_cast<int>(architecture));
}

}  // namespace hlm
