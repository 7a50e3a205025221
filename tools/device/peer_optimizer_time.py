#!/usr/bin/env python3
"""The peer's optimizer step alone, for the seed's recipe ([perf] #20 item 4).

peer_probe.py's hf_distill times one step of ROWS rows that ends with an optimizer step (torch's fused AdamW over the
bf16 student). The seed's recipe (Table C.3) takes one optimizer step per 96 x 1024 tokens (micro-batch 2,
accumulation 48), so per 8 rows it pays 1/12 of an optimizer step. This script times that optimizer step on the same
student (HF transformers' Qwen3-Next at the qwen3-4b shape the probe builds: 36 layers, hidden 2560, 32 q / 8 kv heads
of 128, MLP 9728, GDN heads 32 of 128, every 4th layer full attention, untied head; bf16 parameters, gradients set to
random bf16 values), so that the peer's time per 8 rows under the recipe can be stated as
    hf_distill_step(ROWS=8) - optimizer + optimizer / 12
(the gradient accumulation itself assumed to cost what the probe's fresh gradients cost). Prints one JSON line.

usage: python3 tools/device/peer_optimizer_time.py [--iters 5] [--warmup 2]
"""
import argparse
import json
import statistics

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM


def student_qwen3_4b():
    layers, hidden, heads, kv, head_dim, mlp, vocab = 36, 2560, 32, 8, 128, 9728, 151936
    kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
    config = Qwen3NextConfig(hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab,
                             layer_types=kinds, linear_num_key_heads=heads, linear_num_value_heads=heads,
                             linear_key_head_dim=head_dim, linear_value_head_dim=head_dim,
                             mlp_only_layers=list(range(layers)), num_experts=0, tie_word_embeddings=False)
    return Qwen3NextForCausalLM(config).to("cuda", torch.bfloat16).train()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    student = student_qwen3_4b()
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, device="cuda", dtype=p.dtype, generator=gen) * 1e-3
    times = []
    for i in range(args.warmup + args.iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(start.elapsed_time(end))
    print(json.dumps({"section": "peer_optimizer_step", "optimizer": "torch.optim.AdamW(fused=True), bf16 states",
                      "params": sum(p.numel() for p in params), "tensors": len(params),
                      "ms": statistics.median(times), "ms_all": times,
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)


if __name__ == "__main__":
    main()
