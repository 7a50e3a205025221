// The CUDA evaluation backend of the NIAH harness (`hybridlm niah --device cuda` and `hybridlm niah experiment
// --device cuda`): the model's weights uploaded once to the process's CUDA context, each cell's engine built over them
// with its state (KV pools, GDN states) in device memory (infer/cuda/cuda_engine.h).
// Precision, the mechanism of `hybridlm generate --device cuda` (cli/cmd_generate.cpp) and bench_generate:
//   fp32: fp32 weights and KV cache (plans with kv_element_bytes 4);
//   bf16: CudaModel::drop_fp32_weights() right after the upload (every linear, the LM head and the embedding held
//         once, in bf16; bf16 tensor-core GEMMs with fp32 accumulation), and plans with kv_element_bytes 2 (bf16 KV
//         cache); the GDN recurrent and conv state stay fp32.
// The default state budget is 90 % of the device memory left free after the upload (and the drop).
#pragma once
#include <string>

#include "evals/niah/niah_run.h"
#include "models/model.h"

namespace hlm {

// `precision`: "fp32" or "bf16" (input error otherwise). The backend's kv_element_bytes is the one to put into
// NiahRunSettings; keep_alive holds the device model.
NiahEvalBackend niah_cuda_eval_backend(const Model& model, const std::string& precision);

}  // namespace hlm
