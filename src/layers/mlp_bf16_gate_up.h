// HLM_MLP_BF16_GATE_UP=on|off (core/env_switch.h; on by default since session 38: the whole GPU suites passed with it
// on, and the 4B recipe step took 8,146.8 instead of 8,250.8 ms per 96 rows at 10.7 GiB less, H200 session 36): in
// the GPU's bf16 compute mode, whether a SwiGLU MLP's gate_proj and up_proj write their products as bf16 (cuBLASLt's
// bf16 output: the fp32 sum rounded once) instead of fp32, for batches beyond the small-row GEMV's rows (decode keeps its fp32 GEMV and
// SwiGLU fold). SwiGLU then reads the bf16 values (ops/swiglu/swiglu_cuda.h, *_bf16_in_cuda), and training keeps
// them for the backward: 4 bytes per element of gate and up instead of 8 (at the 4B student's micro-batch of 8 × 1024
// tokens, 36 layers × 8,192 × 9,728 × 4 bytes = 10.7 GiB less kept) and half the bytes for SwiGLU to read.
// Numerics: one more rounding (of gate and up, relative ≤ 2⁻⁹ each) before SwiGLU, which is what a bf16 PyTorch model
// does anyway; the fp32 mode and the CPU are unchanged. Here, not in layers/cuda, because the memory plan
// (train/memory_plan.h) counts the kept bytes on machines without CUDA too.
#pragma once

namespace hlm {

bool mlp_bf16_gate_up();
// 1 / 0 for the whole process; −1: the environment again (bench_distill_step --mlp-gate-up, tests).
void mlp_set_bf16_gate_up(int on);

// HLM_MLP_BF16_DH=on|off (core/env_switch.h; on by default since session 40: the whole GPU suites passed with it on,
// test_cuda_ops and test_cuda_models on an H100, and the 4B step under the seed's recipe took 0.5 % less time with it,
// 8,664.0 -> 8,621.5 ms per 96 rows at micro-batch 2 on an H100, session 39): in the bf16 gate/up
// form's backward (above), whether the down_proj product dh = dy · W_down [rows, F] is written as bf16 (cuBLASLt's
// bf16 output: the fp32 sum rounded once) instead of fp32, and SwiGLU's backward reads it as bf16
// (swiglu_backward_bf16_all_cuda). dh's only reader is SwiGLU's backward, whose dgate and dup are rounded to bf16
// anyway, and a bf16 PyTorch model's autograd keeps dh in bf16 too: 2 bytes written and 2 read per element of
// [rows, F] instead of 4 and 4 (at the 4B student's micro-batch of 8 × 1024 tokens, 36 × 8,192 × 9,728 × 4 bytes =
// 11.5 GB less memory traffic per micro-batch, ~3 ms on an H200 by the bytes). Numerics: one more rounding (of dh, relative ≤ 2⁻⁹) before
// SwiGLU's backward. Without the bf16 gate/up form, or in the fp32 mode, nothing changes.
bool mlp_bf16_dh();
// 1 / 0 for the whole process; −1: the environment again (bench_distill_step --mlp-dh, tests).
void mlp_set_bf16_dh(int on);

}  // namespace hlm
