// The converted student's greedy generation against its torch reference (HF Qwen3 layers + HF OlmoHybrid GDN layers,
// tools/goldens/make_generate_goldens.py case generate_student, generated on the GPU machine). A missing golden FAILS.
#include <gtest/gtest.h>

#include "generate_golden_check.h"

TEST(GenerateGoldens, ConvertedStudentMatchesTheTorchReference) {
  hlm::test::check_generate_golden("generate_student");
}
