#!/usr/bin/env python3
"""HF transformers `generate` timing: the serving peer of bench/bench_generate.cpp (issue #18 item 5).

Runs on the GPU machine (PyTorch + transformers 5.x, no internet). A random-weight model of a named shape (the same
shapes as bench_generate's built-ins) generates greedily from B random prompts of L tokens, SDPA attention, HF's
default dynamic cache. Full-attention shapes are Qwen3ForCausalLM; the hybrid shapes (qwen3_4b_hybrid,
olmo_hybrid_7b: every 4th layer full attention, the rest Gated DeltaNet with bench_generate's head counts) are
Qwen3NextForCausalLM with dense MLPs (no experts) -- transformers' GDN hybrid whose fast path is FLA's kernels.
Its attention layers carry Qwen3-Next's output gate (a q projection twice as wide) and partial rotary, so they do a
little more work than ours. --with-fla puts .anchors (FLA's fla/ and the causal_conv1d stand-in, see
../shared/bench/README.md) on the import path first and binds FLA's chunked and fused-recurrent gated delta rule and
the Triton conv to every GDN layer; the JSON line's `gdn_kernel` lists each kernel attribute of a GDN layer with the
module it comes from (fla.* when FLA is used, transformers' torch fallback otherwise). Per (dtype, L, B) it times, after one warm-up call:
    prefill_s   generate(max_new_tokens=1): the prompt forward plus one token
    decode      generate(max_new_tokens=N, min_new_tokens=N) minus the prefill call, over N - 1 decode steps
and prints one JSON line each: shape, dtype, L, B, prefill_s, decode_ms_per_step, decode_tok_s (B tokens per step),
peak_gib (torch.cuda.max_memory_allocated). EOS is disabled so every call makes exactly N tokens.

    python3 tools/peer/hf_generate.py --shape qwen3_4b --contexts 1024 --batches 1,64 --new-tokens 16 \
        --dtypes float32,bfloat16
"""
import argparse
import json
import time

import torch
import os
import sys

from transformers import Qwen3Config, Qwen3ForCausalLM

# bench_generate's built-in dense shapes (bench/bench_generate.cpp header).
SHAPES = {
    "qwen3_4b": dict(num_hidden_layers=36, hidden_size=2560, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=9728, vocab_size=151936, tie_word_embeddings=True),
    "olmo3_7b": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
                     head_dim=128, intermediate_size=11008, vocab_size=100278, tie_word_embeddings=False),
}
# The hybrids: the dense shape above plus GDN heads (key / value heads of 128, conv 4), 3 GDN : 1 attention.
HYBRIDS = {
    "qwen3_4b_hybrid": ("qwen3_4b", dict(linear_num_key_heads=16, linear_num_value_heads=32)),
    "olmo_hybrid_7b": ("olmo3_7b", dict(linear_num_key_heads=32, linear_num_value_heads=32)),
}


FLA_WANTED = False


def use_fla():
    # FLA refuses its gated backward on Triton < 3.7.1 on Hopper; inference does not use it, the guard is lifted as
    # peer_probe.py does so that the import succeeds.
    global FLA_WANTED
    FLA_WANTED = True
    torch.zeros(1, device="cuda")  # FLA picks its device backend at import: a CUDA context must exist first
    sys.path.insert(0, os.path.join(os.getcwd(), ".anchors"))
    import fla.ops.common.chunk_o as co
    co.TRITON_ABOVE_3_7_1 = True


def build_model(shape, dtype):
    """(model, vocab_size, gdn_kernel) for a named shape, random weights on the GPU."""
    if shape in SHAPES:
        cfg = Qwen3Config(**SHAPES[shape], max_position_embeddings=40960, rope_theta=1e6,
                          attn_implementation="sdpa", dtype=dtype)
        with torch.device("cuda"):
            return Qwen3ForCausalLM(cfg).to(dtype).eval(), cfg.vocab_size, None
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    base, gdn = HYBRIDS[shape]
    dense = dict(SHAPES[base])
    layers = dense["num_hidden_layers"]
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    cfg = Qwen3NextConfig(**dense, **gdn, linear_key_head_dim=128, linear_value_head_dim=128,
                          linear_conv_kernel_dim=4, layer_types=types, mlp_only_layers=list(range(layers)),
                          num_experts=0, max_position_embeddings=40960, rope_theta=1e6,
                          attn_implementation="sdpa", dtype=dtype)
    with torch.device("cuda"):
        model = Qwen3NextForCausalLM(cfg).to(dtype).eval()
    if FLA_WANTED:
        bind_fla(model)
    return model, cfg.vocab_size, gdn_kernels(model.model.layers[0].linear_attn)


def gdn_kernels(layer):
    """'name=module' for each delta-rule / conv callable a GDN layer can reach (its attributes, then its modeling
    module's globals): which implementation runs."""
    import importlib
    mod = importlib.import_module(type(layer).__module__)
    found = {}
    for owner, tag in ((layer, "attr"), (mod, "global")):
        for n in dir(owner):
            if ("delta_rule" in n or "conv1d" in n) and not n.startswith("__"):
                v = getattr(owner, n)
                if callable(v):
                    found[f"{tag}:{n}"] = getattr(v, "__module__", None) or type(v).__name__
    return ",".join(f"{k}={v}" for k, v in sorted(found.items()))


def bind_fla(model):
    """Points the GDN layers at FLA (and the Triton conv stand-in), whatever transformers' availability check decided
    at import: the layers' kernel attributes where they have them, and the modeling module's globals the forward
    reads (the FLA names and the torch fallbacks alike): the chunked rule for prefill, the fused recurrent one for
    decode, the conv for both."""
    import importlib
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    import causal_conv1d

    def target(name):
        if "chunk_gated_delta_rule" in name:
            return chunk_gated_delta_rule
        if "recurrent_gated_delta_rule" in name:
            return fused_recurrent_gated_delta_rule
        if name.endswith("causal_conv1d_fn"):
            return causal_conv1d.causal_conv1d_fn
        if name.endswith("causal_conv1d_update"):
            return causal_conv1d.causal_conv1d_update
        return None

    layers = [layer.linear_attn for layer in model.model.layers if getattr(layer, "linear_attn", None) is not None]
    mod = importlib.import_module(type(layers[0]).__module__)
    for owner in [mod] + layers:
        for n in list(vars(owner)):
            fn = target(n)
            if fn is not None and (owner is mod or callable(getattr(owner, n)) or getattr(owner, n) is None):
                setattr(owner, n, fn)
    if hasattr(mod, "is_fast_path_available"):
        mod.is_fast_path_available = True


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3_4b", choices=sorted(SHAPES) + sorted(HYBRIDS))
    ap.add_argument("--with-fla", action="store_true", help="use FLA from .anchors for the GDN layers")
    ap.add_argument("--contexts", default="1024")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args()
    if args.with_fla:
        use_fla()
    torch.manual_seed(0)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        model, vocab_size, gdn_kernel = build_model(args.shape, dtype)
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        for L in (int(x) for x in args.contexts.split(",")):
            for B in (int(x) for x in args.batches.split(",")):
                ids = torch.randint(1, vocab_size, (B, L), device="cuda")
                mask = torch.ones_like(ids)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()

                def gen(n):
                    with torch.no_grad():
                        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                              do_sample=False)
                try:
                    gen(2)  # warm-up
                    prefill_s, _ = timed(lambda: gen(1))
                    total_s, out = timed(lambda: gen(args.new_tokens))
                except torch.cuda.OutOfMemoryError:
                    print(json.dumps(dict(shape=args.shape, dtype=dtype_name, L=L, B=B, error="out of memory")),
                          flush=True)
                    continue
                assert out.shape[1] == L + args.new_tokens
                step_ms = (total_s - prefill_s) / (args.new_tokens - 1) * 1e3
                print(json.dumps(dict(shape=args.shape, dtype=dtype_name, L=L, B=B, prefill_s=round(prefill_s, 4),
                                      decode_ms_per_step=round(step_ms, 3),
                                      decode_tok_s=round(B / step_ms * 1e3, 1),
                                      peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                                      gdn_kernel=gdn_kernel)), flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
