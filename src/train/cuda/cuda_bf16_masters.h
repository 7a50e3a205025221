// The lean memory plan's device layout (train/memory_plan.h, docs/memory.md): bf16 master weights and bf16 linear
// gradients on top of a CudaModel in the bf16 compute mode, built from CudaModel's public tensor lists (named_tensors,
// bf16_copies), as the teacher-bf16 plan frees the teacher's fp32 linears.
//   masters: every fp32 weight that has a bf16 copy (each linear, and an untied LM head) is freed, so its bf16 copy IS
//     its master weight (CudaAdamW with MasterFormat::Bf16Sr updates it in place with stochastic rounding). The
//     embedding (a tied head's storage too), the norms and the small GDN tensors keep fp32 storage holding bf16
//     values (the host AdamW of the lean plan rounds them; the device update rounds stochastically into them). The
//     bf16 mode's forward and backward read only the copies, so training runs unchanged. Afterwards the model's
//     refresh_bf16 and download_into must not be used (their fp32 sources are gone): cuda_refresh_held_copies and
//     cuda_download_bf16_masters take their place.
//   gradients: every linear's weight gradient ("*_proj.weight") held in bf16, zeroed; the linears' backward adds each
//     micro-batch's fp32 product into it (matmul_backward_mixed_cuda with a bf16 dw: the product in fp32 scratch,
//     then the fp32 sum rounded to bf16 once, within half a bf16 ulp), so after k micro-batches an element is within
//     k such roundings of the fp32 accumulation. Biases, norms, the embedding, the head and the GDN's small tensors
//     keep fp32 gradients.
// Tensor by tensor; the freed blocks go back to the driver. Only host code of the CUDA build includes this header.
#pragma once
#include <vector>

#include "models/cuda/cuda_model.h"
#include "train/adamw.h"

namespace hlm {

// The student: frees the fp32 weights that have bf16 copies (the bf16 compute mode must be on). Also used by ZeRO-1 in
// the bf16 mode with fp32 masters (CudaTrainDevice::attach): there the masters of the freed weights live in the data
// parallel shard (cuda_data_parallel.h) and the copies stay the rounding of those masters.
void cuda_hold_bf16_masters(CudaContext& ctx, CudaModel& model);
// A gradient holder (CudaModel::zeros_like): the linears' weight gradients in bf16, zeroed.
void cuda_hold_bf16_linear_grads(CudaContext& ctx, CudaModel& grads);
// After an update: re-rounds the bf16 copies whose fp32 weight is still held (a tied head's, from the embedding).
void cuda_refresh_held_copies(CudaContext& ctx, CudaModel& model);
// Copies every weight into the host tensor of the same HF name in `host` (the host optimizer's parameters, which
// alias the host model's weights): fp32 tensors as they are, bf16 masters widened exactly. Waits for the stream.
// widen_copies false: freed fp32 slots are skipped instead (ZeRO-1 with sharded masters gathers their fp32 values from
// the ranks' shards: CudaDataParallel::gather_masters, train/cuda/cuda_data_parallel.h).
void cuda_download_bf16_masters(CudaContext& ctx, CudaModel& model, const std::vector<AdamWParam>& host,
                                bool widen_copies = true);

}  // namespace hlm
