// hybridlm's greedy generation against HF transformers `generate` (issue #18 item 3b): for each golden case
// (tools/goldens/make_generate_goldens.py), every prompt's 40 new ids must equal HF's exactly. A missing golden FAILS
// (open_golden throws with the regenerate hint).
// The converted student's case is test_generate_student_golden.cpp.
// Exact equality is the criterion; it holds as long as no greedy step has a near-tie between the top two
// logits below the engines' fp32 differences (the script prints the ids; a failure names the first differing step).
#include <gtest/gtest.h>

#include "generate_golden_check.h"

using namespace hlm;


TEST(GenerateGoldens, Qwen3MatchesHfGenerate) { test::check_generate_golden("generate_qwen3"); }
TEST(GenerateGoldens, OlmoHybridMatchesHfGenerate) { test::check_generate_golden("generate_olmo_hybrid"); }

// Granite-4.0-H (granitemoehybrid_tiny: Mamba-2 conv + SSM state carried from the chunked prefill into one-token
// decode steps, NoPE attention). Golden written on the H200 machine in session 11 (transformers 5.17, fp32 CPU).
TEST(GenerateGoldens, GraniteMoeHybridMatchesHfGenerate) {
  test::check_generate_golden("generate_granitemoehybrid");
}

// Ring-mini-linear-2.0 shape (bailing_moe_linear_tiny): the Lightning state carried from the prefill (7 and 70
// tokens: the second spans two simple-GLA chunks) into decode steps. The reference ids are greedy full forwards of
// tools/goldens/make_bailing_goldens.py's torch statement (no HF class exists), not HF `generate`.
TEST(GenerateGoldens, BailingMoeLinearMatchesTorchGreedy) {
  test::check_generate_golden("generate_bailing_moe_linear");
}
