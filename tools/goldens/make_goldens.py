#!/usr/bin/env python3
"""Writes tiny random-weight HF models and their golden outputs for hybridlm's parity tests.

Run on the GPU machine (PyTorch, transformers 5.x, safetensors; no internet needed), from the repository root:
    python3 tools/goldens/make_goldens.py --out tests/golden [--only CASE ...]

Each case becomes tests/golden/<case>/ with the save_pretrained output (config.json, model.safetensors) and
golden.safetensors (see golden_io.py) holding:
    input_ids     int64 [2, 19]   two independent sequences, no padding (attention_mask all ones)
    attn_in.i     [2, 19, 64]     residual stream entering decoder layer i
    attn_delta.i  [2, 19, 64]     output of layers[i].self_attn (before Granite's residual_multiplier)
    attn_out.i    [2, 19, 64]     residual stream after the attention add (input of post_attention_layernorm)
    mlp_delta.i   [2, 19, 64]     output of layers[i].mlp (before Granite's residual_multiplier)
    final_hidden  [2, 19, 64]     output of model.model.norm
    logits        [2, 19, 320]    after Granite's logits_scaling
Everything runs on the CPU in float32, eager attention, fixed seeds: reruns give identical files. The golden is
computed by a model loaded back from the saved directory (dtype float32), so the saved files are what is tested;
qwen3_untied saves bfloat16 weights to exercise the bf16 -> f32 load path. qwen3_moe_* hold routed experts; for
them mlp_delta.i is the whole MoE block's output (Σ over the chosen experts). qwen3_5_* are Qwen3.5 text models
(Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM): attn_delta.i is the token mixer's output, linear_attn (Gated DeltaNet)
or the gated self_attn by layer_types; mlp_delta.i of the MoE case includes the gated shared expert. olmo3_* are
post-norm (OLMo 2 blocks): there attn_delta.i = post_attention_layernorm(self_attn(h)), attn_out.i = the MLP's input
(h after the attention add) and mlp_delta.i = post_feedforward_layernorm(mlp(h)); their sliding windows (5, 7) are
shorter than SEQ. cohere2_swa is a parallel block (attention and MLP read one LayerNorm): attn_out.i is there
attn_in.i + attn_delta.i (HF adds h + attn + mlp in that order and keeps no such tensor). granitemoehybrid_* are
Granite-4.0-H models: attn_delta.i is the output of layers[i].mamba or layers[i].self_attn, mlp_delta.i the shared
MLP's output plus, with experts, block_sparse_moe's (added as HF adds them: moe + shared).
Non-goals: GPU numerics, generation, padding/masking variants.
"""
import argparse
import os
import shutil
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only; the GPU machine has no internet

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

VOCAB, HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, EPS = 320, 64, 128, 4, 2, 16, 1e-6
BATCH, SEQ = 2, 19
MAX_DIR_BYTES = 2 * 1024 * 1024

# One row per case: HF model_type, layer count, config kwargs, dtype of the saved weights, seed.
CASES = {
    "qwen3_tied": dict(
        model_type="qwen3", layers=2, save_dtype=torch.float32, seed=1001,
        # rope_parameters left out: the default rope with HF's default theta.
        config=dict(head_dim=HEAD_DIM, tie_word_embeddings=True),
    ),
    "qwen3_untied": dict(
        model_type="qwen3", layers=3, save_dtype=torch.bfloat16, seed=1002,
        config=dict(head_dim=HEAD_DIM, tie_word_embeddings=False, attention_bias=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    ),
    "qwen3_yarn": dict(
        model_type="qwen3", layers=2, save_dtype=torch.float32, seed=1003,
        # A small base so that, with head_dim 16 and original max 16, the yarn ramp spans dims 0..4 and takes the
        # fractional values 1/4, 1/2, 3/4 (with theta 1e4 it would be a 0/1 step). SEQ = 19 > 16.
        config=dict(head_dim=HEAD_DIM, tie_word_embeddings=False, max_position_embeddings=64,
                    rope_parameters={"rope_type": "yarn", "rope_theta": 10.0, "factor": 4.0,
                                     "original_max_position_embeddings": 16}),
    ),
    # Routed experts (Qwen3-MoE): several experts, top-k > 1, GQA 4:2, dense layers by mlp_only_layers or by the
    # sparse step. Router weights are drawn wider than the rest (ROUTER_STD) so the top-k choice is clear-cut: a
    # near tie would let HF and hybridlm pick different experts on rounding alone.
    "qwen3_moe_tiny": dict(
        model_type="qwen3_moe", layers=4, save_dtype=torch.float32, seed=1005,
        config=dict(head_dim=HEAD_DIM, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=3,
                    moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    ),
    "qwen3_moe_step2": dict(
        model_type="qwen3_moe", layers=4, save_dtype=torch.float32, seed=1006,
        config=dict(head_dim=HEAD_DIM, tie_word_embeddings=False, num_experts=6, num_experts_per_tok=2,
                    moe_intermediate_size=24, norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[],
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    # Qwen3.5 dense: an odd layer pattern (full attention at 1 and 4, not every 4th), GQA 4:2, head_dim 24 != 64/4,
    # partial rotary 0.5 (12 of 24 dims rotate, pairs (i, i+6)), GDN with Hv = 2 Hk and dv = 2 dk, zero-centred norms
    # (drawn as offsets around 0), the gated attention's per-head [q | gate] q_proj.
    "qwen3_5_tiny": dict(
        model_type="qwen3_5_text", layers=5, save_dtype=torch.float32, seed=1007, zero_centred_norms=True,
        rotary_dims=12,
        config=dict(head_dim=24, tie_word_embeddings=False, partial_rotary_factor=0.5,
                    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                                 "full_attention"],
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                    linear_value_head_dim=16, linear_conv_kernel_dim=4,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    ),
    # Qwen3.5-MoE: every layer routed experts (6, top-3, always renormalised) plus the sigmoid-gated shared expert;
    # head_dim 32, the default partial rotary 0.25 (8 dims), GDN with dv < dk and Hv = 2 Hk, tied embeddings.
    "qwen3_5_moe_tiny": dict(
        # router_std 0.15: with 0.5 every seed tried (1008..1508 on the H200, 2026-12-01) had a 3rd and 4th router
        # probability within 1e-6 of each other: logits of std ~4 make both tiny, so their absolute gap is too.
        model_type="qwen3_5_moe_text", layers=4, save_dtype=torch.float32, seed=1008, zero_centred_norms=True,
        rotary_dims=8, no_dense_ffn=True, router_std=0.15,
        config=dict(head_dim=32, tie_word_embeddings=True,
                    layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
                    linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=16,
                    linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=6, num_experts_per_tok=3,
                    moe_intermediate_size=24, shared_expert_intermediate_size=40,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    # OLMo-3: sliding-window attention layers (window 5 < SEQ 19) in the default 3:1 pattern (layers 0-2 sliding,
    # 3 full), GQA 4:2, head_dim 24 so q/o are [96, 64] (unequal dims), the same default RoPE on both layer types.
    "olmo3_swa": dict(
        model_type="olmo3", layers=4, save_dtype=torch.float32, seed=1009, extra_head_dim=24,
        config=dict(tie_word_embeddings=False, sliding_window=5,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    ),
    # OLMo-3 with an irregular layer pattern (S F S S F), window 7, and RoPE per layer type: YaRN on the full layers
    # (small base, original max 16 < SEQ, as qwen3_yarn) and default RoPE with another theta on the sliding ones.
    "olmo3_rope2": dict(
        model_type="olmo3", layers=5, save_dtype=torch.float32, seed=1010,
        config=dict(tie_word_embeddings=False, sliding_window=7, max_position_embeddings=64,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                 "full_attention"],
                    rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 10.0, "factor": 4.0,
                                                        "original_max_position_embeddings": 16},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}),
    ),
    # Qwen3-Next: the GDN's grouped in_proj_qkvz / in_proj_ba (per key head [q | k | v of its 2 value heads | z of
    # them], [b | a]), layer 1 dense by mlp_only_layers, the others 6 experts top-2 NOT renormalised + shared expert.
    "qwen3_next_tiny": dict(
        model_type="qwen3_next", layers=4, save_dtype=torch.float32, seed=1009, zero_centred_norms=True,
        rotary_dims=8,
        config=dict(head_dim=32, tie_word_embeddings=False,
                    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                    linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=6, num_experts_per_tok=2,
                    moe_intermediate_size=24, shared_expert_intermediate_size=32, norm_topk_prob=False,
                    decoder_sparse_step=1, mlp_only_layers=[1],
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    # Cohere2 (Command R7B; Tiny Aya names this architecture): parallel LayerNorm blocks, sliding window 5 < SEQ on
    # layers 0-2 with interleaved RoPE, NoPE full layer 3, GQA 4:2, logits × 0.25, tied embeddings. head_dim is
    # forced to hidden / heads by the config class, so q/o cannot be made unequal here.
    "cohere2_swa": dict(
        model_type="cohere2", layers=4, save_dtype=torch.float32, seed=1011,
        config=dict(tie_word_embeddings=True, sliding_window=5, logit_scale=0.25, layer_norm_eps=1e-5,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
    # Granite-4.0-H (GraniteMoeHybridForCausalLM): an irregular mamba / attention pattern (M A M M A), NoPE attention
    # (position_embedding_type None) with GQA 4:2 and scale attention_multiplier, Mamba-2 with 8 heads (!= 4 attention
    # heads) of P 16, d_state 12 != P, 2 groups, conv 4 with bias, chunk 8 (SEQ 19 is not a multiple), the shared MLP
    # (width 96) in every layer, Granite's four scalars. The _moe case adds 6 routed experts top-2 of width 32.
    "granitemoehybrid_tiny": dict(
        model_type="granitemoehybrid", layers=5, save_dtype=torch.float32, seed=1012, no_dense_ffn=True,
        mamba_layers=[0, 2, 3],
        config=dict(tie_word_embeddings=False, intermediate_size=FFN, shared_intermediate_size=96,
                    num_local_experts=0, num_experts_per_tok=2, position_embedding_type=None,
                    layer_types=["mamba", "attention", "mamba", "mamba", "attention"],
                    mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=12, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=8, mamba_conv_bias=True, mamba_proj_bias=False,
                    embedding_multiplier=4.0, residual_multiplier=0.3, attention_multiplier=0.125,
                    logits_scaling=3.0),
    ),
    "granitemoehybrid_moe_tiny": dict(
        model_type="granitemoehybrid", layers=4, save_dtype=torch.float32, seed=1013, no_dense_ffn=True,
        mamba_layers=[0, 1, 3], router_std=0.15, retry_near_ties=True,
        config=dict(tie_word_embeddings=False, intermediate_size=32, shared_intermediate_size=48,
                    num_local_experts=6, num_experts_per_tok=2, position_embedding_type=None,
                    layer_types=["mamba", "mamba", "attention", "mamba"],
                    mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=12, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=8, mamba_conv_bias=True, mamba_proj_bias=False,
                    embedding_multiplier=4.0, residual_multiplier=0.3, attention_multiplier=0.125,
                    logits_scaling=3.0),
    ),
    "granite": dict(
        model_type="granite", layers=2, save_dtype=torch.float32, seed=1004,
        config=dict(tie_word_embeddings=False, mlp_bias=False, embedding_multiplier=6.0, residual_multiplier=0.3,
                    attention_multiplier=0.1, logits_scaling=4.0,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    ),
}


def model_classes(model_type):
    if model_type == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM
        return Qwen3Config, Qwen3ForCausalLM
    if model_type == "qwen3_moe":
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        return Qwen3MoeConfig, Qwen3MoeForCausalLM
    if model_type == "granite":
        from transformers import GraniteConfig, GraniteForCausalLM
        return GraniteConfig, GraniteForCausalLM
    if model_type == "granitemoehybrid":
        from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM
        return GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM
    if model_type == "cohere2":
        from transformers import Cohere2Config, Cohere2ForCausalLM
        return Cohere2Config, Cohere2ForCausalLM
    if model_type == "olmo3":
        from transformers import Olmo3Config, Olmo3ForCausalLM
        return Olmo3Config, Olmo3ForCausalLM
    if model_type == "qwen3_5_text":
        from transformers.models.qwen3_5 import modeling_qwen3_5 as mod
        return mod.Qwen3_5TextConfig, mod.Qwen3_5ForCausalLM
    if model_type == "qwen3_next":
        from transformers.models.qwen3_next import modeling_qwen3_next as mod
        return mod.Qwen3NextConfig, mod.Qwen3NextForCausalLM
    if model_type == "qwen3_5_moe_text":
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mod
        return mod.Qwen3_5MoeTextConfig, mod.Qwen3_5MoeForCausalLM
    raise ValueError(f"unknown model_type {model_type}")


ROUTER_STD = 0.5


class NearTieError(RuntimeError):
    """An MoE router's k-th and (k+1)-th probabilities closer than the golden's rounding slack."""


def reinit_parameters(model, seed, zero_centred_norms=False, router_std=ROUTER_STD):
    """Every parameter redrawn so the goldens are sensitive to each: Linear/Embedding weights ~ N(0, 0.08),
    biases ~ N(0, 0.05), RMSNorm weights = 1 + N(0, 0.1); MoE router weights ~ N(0, ROUTER_STD), stacked expert
    weights (transformers 5.x *Experts: gate_up_proj, down_proj) ~ N(0, 0.08). Fails if a parameter is left
    untouched. zero_centred_norms (Qwen3.5: y = n (1 + w)): those RMSNorm weights are offsets, drawn N(0, 0.1); its
    GDN modules get A_log = log U(1, 16), dt_bias ~ N(0, 0.5), conv1d ~ N(0, 0.3), gated-norm weights 1 + N(0, 0.1).
    GraniteMoeHybrid's Mamba-2 layers: A_log = log U(1, 16), dt_bias ~ N(-2, 0.5), D ~ N(1, 0.3), conv1d bias
    ~ N(0, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    touched = set()
    with torch.no_grad():
        for module_name, module in model.named_modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                draws = {"weight": (0.0, 0.08), "bias": (0.0, 0.05)}
            elif type(module).__name__.endswith("RMSNormGated"):
                draws = {"weight": (1.0, 0.1)}
            elif type(module).__name__.endswith("RMSNorm"):
                draws = {"weight": (0.0, 0.1) if zero_centred_norms else (1.0, 0.1)}
            elif type(module).__name__.endswith("LayerNorm"):  # Cohere2LayerNorm: a weight, no bias
                draws = {"weight": (1.0, 0.1)}
            elif type(module).__name__.endswith("GatedDeltaNet"):
                draws = {"A_log": "log_uniform", "dt_bias": (0.0, 0.5)}
            elif type(module).__name__.endswith("MambaLayer"):  # GraniteMoeHybrid's Mamba-2 mixer
                # dt_bias around -2: dt ~ softplus(-2) ~ 0.13, per-token decays exp(-dt·A) from ~0.9 to ~0.1 over
                # A in [1, 16), so states carry across the 8-token chunks (the SSD form's inter-chunk term is tested).
                draws = {"A_log": "log_uniform", "dt_bias": (-2.0, 0.5), "D": (1.0, 0.3)}
            elif isinstance(module, torch.nn.Conv1d):
                draws = {"weight": (0.0, 0.3), "bias": (0.0, 0.1)}
            elif type(module).__name__.endswith("Router"):
                draws = {"weight": (0.0, router_std)}
            elif type(module).__name__.endswith("Experts"):
                draws = {"gate_up_proj": (0.0, 0.08), "down_proj": (0.0, 0.08), "weight": (0.0, 0.08)}
            else:
                continue
            for pname, param in module.named_parameters(recurse=False):
                if id(param) in touched:
                    continue  # a tied weight: drawn once, through its first owner
                if (module_name.endswith(".mlp.gate") or module_name.endswith(".router.layer")) and pname == "weight":
                    mean, std = 0.0, router_std  # an nn.Linear router (older transformers)
                elif draws[pname] == "log_uniform":  # GDN decay rates A = exp(A_log) in [1, 16)
                    u = torch.rand(param.shape, generator=gen, dtype=torch.float32)
                    param.copy_(torch.log(1.0 + 15.0 * u))
                    touched.add(id(param))
                    continue
                else:
                    mean, std = draws[pname]
                param.copy_(mean + std * torch.randn(param.shape, generator=gen, dtype=torch.float32))
                touched.add(id(param))
    missed = [name for name, p in model.named_parameters() if id(p) not in touched]
    if missed:
        raise RuntimeError(f"parameters not re-initialised: {missed}")


def build_and_save(case, spec, case_dir):
    config_cls, model_cls = model_classes(spec["model_type"])
    sizes = {} if spec.get("no_dense_ffn") else {"intermediate_size": FFN}  # Qwen3_5MoeTextConfig has none
    common = dict(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=spec["layers"],
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, rms_norm_eps=EPS, hidden_act="silu",
        attn_implementation="eager", **sizes, **spec["config"])
    # extra_head_dim: a config class without a head_dim field (Olmo3Config; its attention takes getattr(config,
    # "head_dim", hidden // heads)). Tried as an extra attribute; if this transformers refuses or ignores it, the case
    # falls back to hidden // heads (config.json then holds no head_dim, which is what hybridlm reads).
    head_dim = spec.get("extra_head_dim")
    config = None
    if head_dim is not None:
        try:
            config = config_cls(head_dim=head_dim, **common)
        except Exception as e:  # noqa: BLE001 (a strict dataclass may refuse an unknown field)
            print(f"  {config_cls.__name__} refused head_dim={head_dim} ({type(e).__name__}: {e})", flush=True)
    if config is None and "mamba_layers" in spec:
        # GraniteMoeHybridConfig: layer_types of "mamba" / "attention" (4.x); a transformers that refuses them gets
        # its own names ("linear_attention" / "full_attention"). The layers as built are checked below either way.
        try:
            config = config_cls(**common)
        except Exception as e:  # noqa: BLE001
            print(f"  {config_cls.__name__} refused layer_types {common['layer_types']} ({type(e).__name__}: {e}); "
                  "retrying with linear_attention / full_attention", flush=True)
            renamed = {"mamba": "linear_attention", "attention": "full_attention"}
            common = dict(common, layer_types=[renamed[t] for t in common["layer_types"]])
    if config is None:
        config = config_cls(**common)
    torch.manual_seed(spec["seed"])
    model = model_cls(config).eval()
    if head_dim is not None and model.model.layers[0].self_attn.q_proj.out_features != HEADS * head_dim:
        print(f"  head_dim={head_dim} was ignored; using hidden // heads", flush=True)
        config = config_cls(**common)
        torch.manual_seed(spec["seed"])
        model = model_cls(config).eval()
    if "mamba_layers" in spec:  # GraniteMoeHybrid: the layer kinds as built, and what the attention layers rotate
        built = [i for i, layer in enumerate(model.model.layers) if getattr(layer, "mamba", None) is not None]
        print(f"  mamba layers {built}, layer_types {config.layer_types}, position_embedding_type "
              f"{config.position_embedding_type}, rotary_emb {getattr(model.model, 'rotary_emb', None)}", flush=True)
        if built != spec["mamba_layers"]:
            raise RuntimeError(f"mamba layers {built}, expected {spec['mamba_layers']}")
    if spec["model_type"] == "olmo3":
        print(f"  layer_types {config.layer_types}, sliding_window {config.sliding_window}, rope_parameters "
              f"{config.rope_parameters}, q_proj rows {model.model.layers[0].self_attn.q_proj.out_features}",
              flush=True)
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if tied != spec["config"]["tie_word_embeddings"]:
        raise RuntimeError(f"lm_head tied={tied}, expected {spec['config']['tie_word_embeddings']}")
    reinit_parameters(model, spec["seed"], spec.get("zero_centred_norms", False), spec.get("router_std", ROUTER_STD))
    if "rotary_dims" in spec:  # partial rotary: the inv_freq table covers rotary_dims / 2 frequencies
        n = model.model.rotary_emb.inv_freq.numel()
        if n * 2 != spec["rotary_dims"]:
            raise RuntimeError(f"rotary dims {2 * n}, expected {spec['rotary_dims']}")

    if os.path.isdir(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)
    model.to(spec["save_dtype"]).save_pretrained(case_dir)
    if spec["model_type"] == "qwen3_moe":
        check_moe_checkpoint(model, case_dir)
    print_saved_names(case_dir)
    gen_config = os.path.join(case_dir, "generation_config.json")
    if os.path.exists(gen_config):
        os.remove(gen_config)
    size = sum(os.path.getsize(os.path.join(case_dir, f)) for f in os.listdir(case_dir))
    if size > MAX_DIR_BYTES:
        raise RuntimeError(f"{case_dir} holds {size} bytes, over the {MAX_DIR_BYTES} limit")

    loaded = model_cls.from_pretrained(case_dir, dtype=torch.float32, attn_implementation="eager",
                                       local_files_only=True).eval()
    if loaded.config._attn_implementation != "eager":
        raise RuntimeError(f"attn_implementation is {loaded.config._attn_implementation}, expected eager")
    for name, p in loaded.named_parameters():
        if p.dtype != torch.float32:
            raise RuntimeError(f"{name} loaded as {p.dtype}")
    return loaded, size


def check_moe_checkpoint(model, case_dir):
    """hybridlm reads the on-disk expert layout, one tensor per expert (mlp.experts.{e}.{gate,up,down}_proj.weight,
    mlp.gate.weight), which save_pretrained writes by reverting transformers 5.x's stacking: fail here, not in the C++
    test, if this transformers saves otherwise. Prints which layers are MoE."""
    from safetensors import safe_open
    cfg = model.config
    with safe_open(os.path.join(case_dir, "model.safetensors"), "pt") as f:
        names = set(f.keys())
    moe_layers = [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "experts")]
    for i in moe_layers:
        want = [f"model.layers.{i}.mlp.gate.weight"] + [
            f"model.layers.{i}.mlp.experts.{e}.{p}.weight" for e in range(cfg.num_experts)
            for p in ("gate_proj", "up_proj", "down_proj")]
        missing = [n for n in want if n not in names]
        if missing:
            raise RuntimeError(f"saved checkpoint lacks per-expert tensors, e.g. {missing[:3]}; it holds "
                               f"{sorted(n for n in names if f'layers.{i}.mlp' in n)[:6]}")
    print(f"  MoE layers {moe_layers} of {cfg.num_hidden_layers}: {cfg.num_experts} experts, top-"
          f"{cfg.num_experts_per_tok}, norm_topk_prob={cfg.norm_topk_prob}; per-expert tensors saved", flush=True)
    return moe_layers


def print_saved_names(case_dir):
    """The checkpoint's tensor names of layers 0-2 (expert 0 only) and those outside model.layers, as transformers
    saved them: hybridlm's loader reads these (tensor table aliases, fused rows, the text prefix)."""
    from safetensors import safe_open
    with safe_open(os.path.join(case_dir, "model.safetensors"), "pt") as f:
        shapes = {n: list(f.get_slice(n).get_shape()) for n in f.keys()}
    shown = [n for n in sorted(shapes) if ".layers." not in n or any(f".layers.{i}." in n for i in range(3))]
    shown = [n for n in shown if ".experts." not in n or ".experts.0." in n or ".experts.gate_up" in n
             or ".experts.down" in n]
    print("  saved tensors (layers 0-2, expert 0): " + ", ".join(f"{n} {shapes[n]}" for n in shown), flush=True)


def mixer_of(layer):
    """The token mixer module: self_attn, linear_attn in Qwen3.5's Gated DeltaNet layers, or mamba in
    GraniteMoeHybrid's Mamba-2 layers (whose other mixer attribute is None)."""
    for name in ("self_attn", "linear_attn", "mamba"):
        module = getattr(layer, name, None)
        if module is not None:
            return module
    raise RuntimeError(f"no token mixer in {type(layer).__name__}")


def granite_ffn_parts(layer):
    """GraniteMoeHybrid's FFN: (shared_mlp, block_sparse_moe or None); None when the layer is not of that kind."""
    shared = getattr(layer, "shared_mlp", None)
    if shared is None:
        return None
    moe = getattr(layer, "block_sparse_moe", None) if getattr(layer, "has_experts", True) else None
    return shared, moe


def record(model, input_ids, attention_mask):
    """One forward with hooks; returns (captures, logits). Each hook must fire exactly once."""
    captured = {}

    def put(name, tensor):
        if name in captured:
            raise RuntimeError(f"hook for {name} fired twice")
        captured[name] = tensor.detach().clone()

    def first_input(args, kwargs):
        return args[0] if args else kwargs["hidden_states"]

    def first_output(output):
        return output[0] if isinstance(output, (tuple, list)) else output

    handles = []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_pre_hook(
            lambda m, a, k, i=i: put(f"attn_in.{i}", first_input(a, k)), with_kwargs=True))
        if hasattr(layer, "post_feedforward_layernorm"):  # post-norm block (OLMo-3): the norms give the deltas
            handles.append(layer.post_attention_layernorm.register_forward_hook(
                lambda m, a, k, o, i=i: put(f"attn_delta.{i}", first_output(o)), with_kwargs=True))
            handles.append(layer.mlp.register_forward_pre_hook(
                lambda m, a, k, i=i: put(f"attn_out.{i}", first_input(a, k)), with_kwargs=True))
            handles.append(layer.post_feedforward_layernorm.register_forward_hook(
                lambda m, a, k, o, i=i: put(f"mlp_delta.{i}", first_output(o)), with_kwargs=True))
            continue
        if not hasattr(layer, "post_attention_layernorm"):  # parallel block (Cohere2): attn_out is computed below
            handles.append(mixer_of(layer).register_forward_hook(
                lambda m, a, k, o, i=i: put(f"attn_delta.{i}", first_output(o)), with_kwargs=True))
            handles.append(layer.mlp.register_forward_hook(
                lambda m, a, k, o, i=i: put(f"mlp_delta.{i}", first_output(o)), with_kwargs=True))
            continue
        handles.append(mixer_of(layer).register_forward_hook(
            lambda m, a, k, o, i=i: put(f"attn_delta.{i}", first_output(o)), with_kwargs=True))
        handles.append(layer.post_attention_layernorm.register_forward_pre_hook(
            lambda m, a, k, i=i: put(f"attn_out.{i}", first_input(a, k)), with_kwargs=True))
        if granite_ffn_parts(layer) is not None:  # mlp_delta = moe + shared_mlp, added after the forward (HF order)
            shared, moe = granite_ffn_parts(layer)
            handles.append(shared.register_forward_hook(
                lambda m, a, k, o, i=i: put(f"_shared.{i}", first_output(o)), with_kwargs=True))
            if moe is not None:
                handles.append(moe.register_forward_hook(
                    lambda m, a, k, o, i=i: put(f"_moe.{i}", first_output(o)), with_kwargs=True))
            continue
        handles.append(layer.mlp.register_forward_hook(
            lambda m, a, k, o, i=i: put(f"mlp_delta.{i}", first_output(o)), with_kwargs=True))
    handles.append(model.model.norm.register_forward_hook(
        lambda m, a, k, o: put("final_hidden", first_output(o)), with_kwargs=True))
    try:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    for i, layer in enumerate(model.model.layers):
        if not hasattr(layer, "post_attention_layernorm"):
            put(f"attn_out.{i}", captured[f"attn_in.{i}"] + captured[f"attn_delta.{i}"])
        if f"_shared.{i}" in captured:
            shared = captured.pop(f"_shared.{i}")
            moe = captured.pop(f"_moe.{i}", None)
            put(f"mlp_delta.{i}", shared if moe is None else moe + shared)
    return captured, logits.detach().clone()


def check_structure(model, captured, logits, input_ids):
    """The captures must chain as the decoder does; a wrong hook point shows up as an O(1) mismatch."""
    cfg = model.config
    resid = float(getattr(cfg, "residual_multiplier", 1.0))
    emb = float(getattr(cfg, "embedding_multiplier", 1.0))
    scale = float(getattr(cfg, "logits_scaling", 1.0))
    logit_mult = float(getattr(cfg, "logit_scale", 1.0))  # Cohere2 multiplies
    n = cfg.num_hidden_layers
    with torch.no_grad():
        checks = [("attn_in.0", captured["attn_in.0"], model.model.embed_tokens(input_ids) * emb)]
        for i in range(n):
            checks.append((f"attn_out.{i}", captured[f"attn_out.{i}"],
                           captured[f"attn_in.{i}"] + captured[f"attn_delta.{i}"] * resid))
            if i + 1 < n:
                checks.append((f"attn_in.{i + 1}", captured[f"attn_in.{i + 1}"],
                               captured[f"attn_out.{i}"] + captured[f"mlp_delta.{i}"] * resid))
        checks.append(("logits", logits, model.lm_head(captured["final_hidden"]) / scale * logit_mult))
    for name, got, want in checks:
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise RuntimeError(f"structure check failed for {name}: max diff {(got - want).abs().max().item()}")
    expected = {"input_ids", "logits", "final_hidden"} | {
        f"{kind}.{i}" for kind in ("attn_in", "attn_delta", "attn_out", "mlp_delta") for i in range(n)}
    present = set(captured) | {"input_ids", "logits"}
    if present != expected:
        raise RuntimeError(f"captured names differ: missing {expected - present}, extra {present - expected}")
    for name, t in captured.items():
        if tuple(t.shape) != (BATCH, SEQ, HIDDEN):
            raise RuntimeError(f"{name} has shape {tuple(t.shape)}")
    if tuple(logits.shape) != (BATCH, SEQ, VOCAB):
        raise RuntimeError(f"logits has shape {tuple(logits.shape)}")


def topk_margins(model, captured):
    """Per MoE layer, the smallest over tokens of p_(k) - p_(k+1) (sorted router softmax): the rounding slack
    before another implementation could choose a different expert set."""
    cfg = model.config
    out = []
    for i, layer in enumerate(model.model.layers):
        parts = granite_ffn_parts(layer)
        if parts is not None:  # GraniteMoeHybrid: router.weight (transformers 5.x) or router.layer.weight
            if parts[1] is None:
                continue
            router = parts[1].router
            weight = router.weight if isinstance(getattr(router, "weight", None), torch.Tensor) else router.layer.weight
        elif hasattr(layer.mlp, "experts"):
            weight = layer.mlp.gate.weight
        else:
            continue
        x = layer.post_attention_layernorm(captured[f"attn_out.{i}"]).reshape(-1, cfg.hidden_size)
        p = torch.softmax(torch.nn.functional.linear(x, weight), dim=-1, dtype=torch.float32)
        top = torch.sort(p, dim=-1, descending=True).values
        k = cfg.num_experts_per_tok
        out.append(round((top[:, k - 1] - top[:, k]).min().item(), 6) if k < weight.shape[0] else 1.0)
    return out


def run_case(case, spec, out_dir):
    case_dir = os.path.join(out_dir, case)
    model, size = build_and_save(case, spec, case_dir)
    gen = torch.Generator().manual_seed(spec["seed"] + 500)
    input_ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    with torch.no_grad():
        captured, logits = record(model, input_ids, attention_mask)
        plain = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    hook_vs_plain = (logits - plain).abs().max().item()
    if hook_vs_plain != 0.0:
        raise RuntimeError(f"logits with hooks differ from a plain forward by {hook_vs_plain}")
    check_structure(model, captured, logits, input_ids)
    tensors = {"input_ids": input_ids, "logits": logits, **captured}
    if spec["model_type"] in ("qwen3_moe", "qwen3_5_moe_text", "qwen3_next") or spec.get("retry_near_ties"):
        margins = topk_margins(model, captured)
        print(f"  smallest gap between the k-th and (k+1)-th router probability per layer: {margins}", flush=True)
        # fp32 router probabilities of hybridlm and torch agree to ~1e-7 here (the captures agree to ~1e-6 relative), so
        # a gap of 1e-5 leaves two orders of magnitude before rounding could flip an expert choice; 1e-4 refused every
        # seed tried with 16 x 2 tokens per layer (smallest gaps 5e-5 .. 7e-4 on the H200, 2026-12-01).
        if min(margins) < 1e-5:
            raise NearTieError("a near tie in the router's top-k: pick another seed or a wider ROUTER_STD")
    write_golden(case_dir, case, tensors, extra_metadata={
        "model_type": spec["model_type"], "num_hidden_layers": spec["layers"],
        "saved_weights_dtype": str(spec["save_dtype"]).split(".")[-1], "seed": spec["seed"]})
    from safetensors import safe_open
    with safe_open(os.path.join(case_dir, "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
    print(f"[OK] {case}: {len(tensors)} golden tensors, {len(names)} weight tensors "
          f"({'lm_head.weight' in names and 'untied' or 'no lm_head.weight'}), {size} bytes, "
          f"max |logits(hooks) - logits(plain)| = {hook_vs_plain}, |logits|max = {logits.abs().max().item():.4f}, "
          f"files: {sorted(os.listdir(case_dir))}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder, e.g. tests/golden")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="cases to write (default: all)")
    args = parser.parse_args()

    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    torch.set_grad_enabled(False)
    failed = []
    for case in args.only or list(CASES):
        try:
            spec = CASES[case]
            # A near tie in an MoE router's top-k: the next seed (recorded in the golden's metadata), a few times.
            for attempt in range(6 if "qwen3_5_moe" in spec["model_type"] or spec.get("retry_near_ties") else 1):
                try:
                    run_case(case, spec, args.out)
                    break
                except NearTieError as e:
                    if attempt == 5:
                        raise
                    print(f"  {e}; retrying with seed {spec['seed'] + 100}", flush=True)
                    spec = dict(spec, seed=spec["seed"] + 100)
        except Exception:
            failed.append(case)
            print(f"[FAILED] {case}:\n{traceback.format_exc()}", flush=True)
    print(f"{len(args.only or CASES) - len(failed)} passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
