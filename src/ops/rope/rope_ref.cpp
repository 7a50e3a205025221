// TEMPORARY stub: being written.
#include "ops/rope/rope.h"
#include "core/error.h"
namespace hlm {
RopeTable rope_table_build(const RopeParams&, int64_t, int64_t) { throw_internal_error("rope: not yet"); }
void rope_forward(float*, const int32_t*, int64_t, int64_t, const RopeTable&) { throw_internal_error("rope: not yet"); }
}  // namespace hlm
