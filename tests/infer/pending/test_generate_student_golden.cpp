// The converted student's greedy generation against its torch reference (HF Qwen3 layers + HF OlmoHybrid GDN layers,
// tools/goldens/make_generate_goldens.py case generate_student). A missing golden FAILS, so this file stays out of
// the suite (tests/infer/pending/ is not globbed) until tests/golden/generate_student/ is committed; then move it to
// tests/infer/.
#include <gtest/gtest.h>

#include "../generate_golden_check.h"

TEST(GenerateGoldens, ConvertedStudentMatchesTheTorchReference) {
  hlm::test::check_generate_golden("generate_student");
}
