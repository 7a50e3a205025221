// The LM-head loss's chunking written as text, for the HLM_LM_HEAD_CHUNKING switch of the GPU trainer (an experiment
// knob: src/train/cuda/cuda_train_device.cpp) and for benches: "ROWSxCOLS" is a row block of ROWS logits rows times a
// vocabulary chunk of COLS columns (positive integers up to 2^31 − 1, as the CUDA loss accepts), and "ROWSxfull" one
// chunk over the whole vocabulary (vocab_chunk = 2^31 − 1, which any vocabulary is below: the CUDA loss's pass 2
// then reuses pass 1's logits tiles, ops/lm_head_loss/lm_head_loss_cuda.h). Anything else is an input error
// (ErrorKind::Input) quoting the text and naming the form.
#pragma once
#include <string>

#include "train/lm_head_loss.h"

namespace hlm {

LmHeadChunking parse_lm_head_chunking(const std::string& text);

// The inverse, for printing a resolved configuration ("4096x4096", "2048xfull").
std::string lm_head_chunking_text(const LmHeadChunking& chunking);

}  // namespace hlm
