"""HF transformers' Qwen3MoeSparseMoeBlock at the Qwen3-30B-A3B shape, timed like bench/bench_moe_layer.cpp.

hidden 2048, 128 experts, top-8 (norm_topk_prob), moe_intermediate_size 768, bf16 weights N(0, 0.02), input N(0, 1)
[1, T, 2048] bf16. Median ms over 20 forwards after 3 warm-ups (CUDA events), under torch.no_grad, for each experts
backend this transformers offers (eager: a loop over the hit experts; grouped_mm: sorted tokens + torch grouped_mm;
batched_mm: per-token weight copies, small T only). Run on the GPU machine in the same call as bench_moe_layer.
Usage: python3 bench/moe_hf_reference.py [T ...]
"""
import sys

import torch
import transformers
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe import modeling_qwen3_moe as m


def median_ms(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def block_for(impl):
    cfg = Qwen3MoeConfig(hidden_size=2048, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                         norm_topk_prob=True)
    cfg._experts_implementation = impl
    torch.manual_seed(0)
    block = m.Qwen3MoeSparseMoeBlock(cfg)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.02)
    return block.to("cuda", torch.bfloat16).eval()


def main():
    tokens = [int(a) for a in sys.argv[1:]] or [1, 128, 4096, 16384]
    print(f"hf: transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for impl in ("eager", "grouped_mm", "batched_mm"):
        try:
            block = block_for(impl)
        except Exception as e:  # a backend this version lacks
            print(f"hf impl={impl}: unavailable ({type(e).__name__}: {e})")
            continue
        conf = getattr(block, "config", None) or getattr(getattr(block, "experts", None), "config", None)
        print(f"hf impl={impl}: the block's config says {getattr(conf, '_experts_implementation', 'n/a')!r}")
        for T in tokens:
            if impl == "batched_mm" and T > 128:  # copies 8 experts' weights per token: 25 MB each
                continue
            x = torch.randn(1, T, 2048, device="cuda", dtype=torch.bfloat16)
            try:
                with torch.no_grad():
                    ms = median_ms(lambda: block(x))
                print(f"hf impl={impl} T={T}: layer {ms:.3f} ms")
            except Exception as e:
                print(f"hf impl={impl} T={T}: failed ({type(e).__name__}: {str(e)[:200]})")
        del block
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
