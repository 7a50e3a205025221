#!/usr/bin/env python3
"""Golden files for the Gated DeltaNet (GDN) layers, from HF transformers 5.17 (torch fallback path, CPU, fp32).

    python3 tools/goldens/make_gdn_goldens.py --out tests/golden [--only CASE ...]

Cases: olmo_hybrid_tiny (whole OlmoHybridForCausalLM, save_pretrained dir + per-layer captures),
olmo_hybrid_dv2 (the same with linear_value_head_dim = 2 x linear_key_head_dim: the saved conv pieces are equal
torch.chunk thirds, not [Dk, Dk, Dv]),
qwen3_5_gdn and qwen3_5_gdn_grouped (Qwen3_5GatedDeltaNet alone, forward + backward).

HF layout facts (read in transformers 5.17: models/olmo_hybrid/{modeling,configuration}_olmo_hybrid.py,
models/qwen3_5/{modeling,configuration}_qwen3_5.py, conversion_mapping.py, core_model_loading.py, modeling_utils.py).
D hidden, Hk/Hv = linear_num_key/value_heads, dk/dv = linear_key/value_head_dim, K conv kernel, G = Hv // Hk.
OLMo-Hybrid GDN module (model.layers.{i}.linear_attn.): q_proj, k_proj [Hk*dk, D]; v_proj, g_proj [Hv*dv, D];
  a_proj, b_proj [Hv, D]; o_proj [D, Hv*dv]; conv1d.weight [2*Hk*dk + Hv*dv, 1, K] over channels [q | k | v];
  A_log [Hv]; dt_bias [Hv]; o_norm.weight [dv] (gated RMSNorm, eps fixed 1e-5). No biases.
  Linear layer (pre-norm): h += linear_attn(input_layernorm(h)); h += mlp(post_attention_layernorm(h)).
  Attention layer (post-norm, no input norm): h += post_attention_layernorm(self_attn(h));
  h += post_feedforward_layernorm(mlp(h)); q_norm / k_norm are RMSNorms over the whole Hq*hd / Hkv*hd projection.
  save_pretrained (default save_original_format=True) reverts conversion_mapping["olmo_hybrid"] = Hub layout:
  conv1d.weight -> q_conv1d.weight [Hk*dk,1,K], k_conv1d.weight [Hk*dk,1,K], v_conv1d.weight [Hv*dv,1,K]
  (torch.chunk into 3 EQUAL parts: right only when Hk*dk == Hv*dv; olmo_hybrid_dv2 records the other case); input_layernorm -> attention_layer_norm;
  post_attention_layernorm -> feedforward_layer_norm in EVERY layer (attention layers too, although the Hub
  converter keeps post_attention_layernorm there). Saved names/shapes: printed, and metadata "saved_tensors".
Qwen3.5 GDN (Qwen3_5GatedDeltaNet): in_proj_qkv [2*Hk*dk + Hv*dv, D] flat [q_all | k_all | v_all] (no per-k-head
  grouping, unlike Qwen3-Next in_proj_qkvz); in_proj_z [Hv*dv, D]; in_proj_b, in_proj_a [Hv, D]; conv1d.weight
  [2*Hk*dk + Hv*dv, 1, K]; dt_bias [Hv]; A_log [Hv]; norm.weight [dv] (gated RMSNorm, eps = rms_norm_eps, plain w,
  not 1+w); out_proj [D, Hv*dv]. beta NOT scaled by 2.
Shared math: depthwise causal conv, no bias, y[c,t] = sum_j w[c,0,j] * x[c, t-K+1+j] (tap K-1 = current token), SiLU;
  split q|k|v, channel = head*d + i; q,k repeat_interleave(G): v-head h reads k-head h // G;
  g = -exp(A_log) * softplus(a + dt_bias) in fp32; beta = sigmoid(b) (OLMo: x2 when linear_allow_neg_eigval);
  q,k <- x * rsqrt(sum x^2 + 1e-6), q *= dk^-0.5; state [B,Hv,dk,dv]; y = rmsnorm(o) * w * silu(gate) per v-head
  over dv (norm before gate; gate = g_proj / in_proj_z); out = o_proj / out_proj(y).
"""
import argparse
import importlib.util
import inspect
import json
import math
import os
import shutil
import sys
import traceback

for _k, _v in (("USE_HUB_KERNELS", "0"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_k, _v)  # no hub kernels (HF torch reference path only), no network
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, fp32

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

SEED = 1234
# A = exp(A_log) is drawn log-uniform over [A_MIN, A_MAX], stratified over heads. With A in [1, 16] only, the per-token
# decay exp(g) is ~e^-5 on average, so outputs hardly depend on earlier tokens; A_MIN = 0.02 (the project's A_log = -4
# regime) keeps slow-decay heads so the recurrence is exercised. Set A_MIN = 1.0 for the stricter [1, 16] range.
A_MIN, A_MAX = 0.02, 16.0
B, T = 2, 100  # T > 64: HF's chunked path carries state across chunks, last chunk partial
GENERATOR = "tools/goldens/make_gdn_goldens.py"
REGENERATE = "python3 tools/goldens/make_gdn_goldens.py --out tests/golden (on the GPU machine)"


def meta(**kw):
    base = {"generator": GENERATOR, "regenerate": REGENERATE, "seed": SEED}
    base.update(kw)
    return {k: (json.dumps(v) if isinstance(v, (list, dict, bool)) else v) for k, v in base.items()}


def check_torch_fallback(mod):
    """Asserts that the GDN / conv functions of an HF modeling module dispatch to the torch reference code."""
    for name, pkg in (("torch_chunk_gated_delta_rule", "fla"), ("torch_recurrent_gated_delta_rule", "fla"),
                      ("causal_conv1d_fn", "causal_conv1d")):
        fn = getattr(mod, name)
        nonlocals = inspect.getclosurevars(fn).nonlocals
        if "is_new_implementation" in nonlocals:
            if nonlocals["is_new_implementation"]:
                raise RuntimeError(f"{mod.__name__}.{name} dispatches to {pkg}, not the torch fallback")
        elif importlib.util.find_spec(pkg) is not None:
            raise RuntimeError(f"{pkg} is installed and {name} could not be inspected")
    print(f"  torch fallback confirmed for {mod.__name__}")


def reinit_(module, gen):
    """Sensitive random init: matrices N(0,0.08), norm weights 1+N(0,0.1), A_log stratified U(log A_MIN, log A_MAX),
    dt_bias N(0,0.5), conv weights N(0,0.3)."""
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if name.endswith("A_log"):
                u = (torch.randperm(p.numel(), generator=gen) + torch.rand(p.numel(), generator=gen)) / p.numel()
                p.copy_((math.log(A_MIN) + u * (math.log(A_MAX) - math.log(A_MIN))).reshape(p.shape))
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif "conv1d" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif p.dim() == 1:
                if "norm" not in name:
                    raise RuntimeError(f"unexpected 1-D parameter {name}")
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)


def maxdiff(a, b):
    return (a.detach().double() - b.detach().double()).abs().max().item()


def check_zero(what, diff):
    print(f"  self-check: {what}: max |diff| = {diff:.3e}")
    if diff != 0.0:
        raise RuntimeError(f"self-check failed: {what}")


def print_tensors(tensors):
    for k, v in tensors.items():
        print(f"    {k:32s} {str(v.dtype).replace('torch.', ''):8s} {list(v.shape)}")


# ---------------------------------------------------------------------------------------------------------------
def case_olmo_hybrid_tiny(out_dir, case="olmo_hybrid_tiny", key_head_dim=16, value_head_dim=16):
    """The whole model. With value_head_dim != key_head_dim (olmo_hybrid_dv2: d_v = 2 d_k, the real model's ratio),
    save_pretrained cuts the fused conv1d into three EQUAL torch.chunk pieces whose boundaries are not [Dk, Dk, Dv]:
    the golden directory then holds exactly that layout, which the C++ loader must re-cut (families.md section 7)."""
    from transformers import OlmoHybridConfig, OlmoHybridForCausalLM
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid as mod
    from safetensors import safe_open

    check_torch_fallback(mod)
    layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    cfg_kwargs = dict(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=1e-6,
        pad_token_id=None, bos_token_id=None, eos_token_id=None, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, layer_types=layer_types,
        linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=key_head_dim,
        linear_value_head_dim=value_head_dim, linear_conv_kernel_dim=4, linear_allow_neg_eigval=True, use_cache=False, attn_implementation="eager")
    torch.manual_seed(SEED)
    config = OlmoHybridConfig(**cfg_kwargs)
    model = OlmoHybridForCausalLM(config).float().eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    assert list(model.config.layer_types) == layer_types, model.config.layer_types
    gdn0 = model.model.layers[0].linear_attn
    assert type(gdn0).__name__ == "OlmoHybridGatedDeltaNet" and gdn0.allow_neg_eigval is True
    conv_dim = 2 * gdn0.key_dim + gdn0.value_dim
    if key_head_dim == value_head_dim:
        assert gdn0.key_dim == gdn0.value_dim, "save_pretrained splits conv1d into 3 equal chunks"
    assert model.model.rotary_emb is not None, "RoPE expected on (rope_theta set)"
    gen = torch.Generator().manual_seed(SEED)
    reinit_(model, gen)
    input_ids = torch.randint(0, config.vocab_size, (B, T), generator=gen, dtype=torch.int64)

    cap, handles = {}, []

    def pre(m, key):  # the module's input hidden states (positional or hidden_states=)
        def hook(_, args, kwargs):
            cap[key] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        handles.append(m.register_forward_pre_hook(hook, with_kwargs=True))

    def post(m, key):  # the module's output (first element if a tuple)
        def hook(_, args, out):
            cap[key] = (out[0] if isinstance(out, tuple) else out).detach().clone()
        handles.append(m.register_forward_hook(hook))

    for i, layer in enumerate(model.model.layers):
        pre(layer, f"attn_in.{i}")
        post(layer, f"layer_out.{i}")
        if layer_types[i] == "linear_attention":
            post(layer.linear_attn, f"mixer_out.{i}")
            post(layer.linear_attn, f"attn_delta.{i}")
            pre(layer.post_attention_layernorm, f"attn_out.{i}")
            post(layer.mlp, f"mlp_delta.{i}")
        else:
            post(layer.self_attn, f"mixer_out.{i}")
            post(layer.post_attention_layernorm, f"attn_delta.{i}")
            pre(layer.mlp, f"attn_out.{i}")
            post(layer.post_feedforward_layernorm, f"mlp_delta.{i}")
    post(model.model.norm, "final_hidden")

    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits
        run1 = dict(cap)
        logits2 = model(input_ids=input_ids, use_cache=False).logits
    for h in handles:
        h.remove()
    check_zero("two identical forward runs, logits", maxdiff(logits, logits2))
    worst = 0.0
    for i in range(len(layer_types)):
        worst = max(worst, maxdiff(run1[f"attn_in.{i}"] + run1[f"attn_delta.{i}"], run1[f"attn_out.{i}"]),
                    maxdiff(run1[f"attn_out.{i}"] + run1[f"mlp_delta.{i}"], run1[f"layer_out.{i}"]))
    check_zero("in + attn_delta == attn_out, attn_out + mlp_delta == layer out", worst)

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    if os.path.exists(os.path.join(out_dir, "generation_config.json")):
        os.remove(os.path.join(out_dir, "generation_config.json"))
    saved = {}
    for fname in [f for f in sorted(os.listdir(out_dir)) if f.endswith(".safetensors")]:
        with safe_open(os.path.join(out_dir, fname), "pt") as f:
            for k in f.keys():
                saved[k] = [str(f.get_tensor(k).dtype).replace("torch.", ""), list(f.get_tensor(k).shape)]
    print(f"  saved {sorted(os.listdir(out_dir))}; tensors:")
    for k in sorted(saved):
        print(f"    {k:52s} {saved[k][0]:8s} {saved[k][1]}")
    saved_conv_rows = [saved[f"model.layers.0.linear_attn.{p}_conv1d.weight"][1][0] for p in "qkv"]
    exact_rows = [gdn0.key_dim, gdn0.key_dim, gdn0.value_dim]
    print(f"  saved q/k/v_conv1d rows {saved_conv_rows}; [Dk, Dk, Dv] = {exact_rows}; fused conv {conv_dim}")
    if sum(saved_conv_rows) != conv_dim:
        raise RuntimeError("saved conv pieces do not add up to the fused conv")
    if key_head_dim != value_head_dim and saved_conv_rows == exact_rows:
        print("  NOTE: this transformers saves the conv cut at [Dk, Dk, Dv]; the golden no longer covers the "
              "equal-chunk layout")
    if any(v[0] != "float32" for v in saved.values()):
        raise RuntimeError("saved weights are not all float32")
    reloaded = OlmoHybridForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        rt = maxdiff(reloaded(input_ids=input_ids, use_cache=False).logits, logits)
    print(f"  self-check: save_pretrained -> from_pretrained round trip, max |diff| logits = {rt:.3e}")
    if rt > 1e-6:
        raise RuntimeError("saved checkpoint does not reproduce the logits")

    tensors = {"input_ids": input_ids, "logits": logits, "final_hidden": run1["final_hidden"]}
    for i in range(len(layer_types)):
        for key in ("attn_in", "attn_delta", "attn_out", "mlp_delta", "mixer_out"):
            tensors[f"{key}.{i}"] = run1[f"{key}.{i}"]
    write_golden(out_dir, case, tensors, meta(
        saved_conv_rows=saved_conv_rows, exact_conv_rows=exact_rows,
        hf_class="OlmoHybridForCausalLM", config_class="OlmoHybridConfig", gdn_class=type(gdn0).__name__,
        config_kwargs=cfg_kwargs, layer_types=layer_types,
        linear_allow_neg_eigval=True, beta_scale=2.0, gdn_o_norm_eps=gdn0.o_norm.variance_epsilon,
        rms_norm_eps=config.rms_norm_eps, rope_parameters=dict(config.rope_parameters), rope_applied=True,
        gdn_chunk_size=inspect.signature(mod.torch_chunk_gated_delta_rule.__wrapped__).parameters["chunk_size"].default,
        gdn_path="torch_chunk_gated_delta_rule (torch fallback, no cache, initial_state=None)",
        attn_delta_definition=("value ADDED to the residual by the token mixer: linear_attention layers -> output of "
                               "linear_attn (pre-norm block, no post-mixer norm); full_attention layers -> "
                               "post_attention_layernorm(self_attn(h)) (OLMo post-norm block, no input norm)"),
        mlp_delta_definition=("value ADDED by the MLP branch: linear_attention -> mlp(post_attention_layernorm(h)); "
                              "full_attention -> post_feedforward_layernorm(mlp(h))"),
        mixer_out_definition="raw output of linear_attn / self_attn (before any post-mixer norm)",
        attn_in_definition="residual stream entering layer i (pre-hook on the decoder layer)",
        attn_out_definition="residual stream after the mixer add (attn_in + attn_delta)",
        final_hidden_definition="model.norm(last layer output) = input of lm_head",
        saved_format="save_pretrained default (save_original_format=True): Hub/converter tensor names",
        saved_tensors=saved))
    print_tensors(tensors)


# ---------------------------------------------------------------------------------------------------------------
def gdn_module_case(out_dir, case, num_k_heads, num_v_heads):
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mod

    check_torch_fallback(mod)
    cfg_kwargs = dict(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, hidden_act="silu", rms_norm_eps=1e-6, linear_conv_kernel_dim=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=num_k_heads,
        linear_num_value_heads=num_v_heads, use_cache=False)
    layer_idx = 0
    torch.manual_seed(SEED)
    config = Qwen3_5TextConfig(**cfg_kwargs)
    assert config.layer_types[layer_idx] == "linear_attention", config.layer_types
    module = mod.Qwen3_5GatedDeltaNet(config, layer_idx=layer_idx).float().train(False)
    gen = torch.Generator().manual_seed(SEED + num_k_heads * 10 + num_v_heads)
    reinit_(module, gen)
    hidden_states = torch.randn(B, T, config.hidden_size, generator=gen)
    grad_output = torch.randn(B, T, config.hidden_size, generator=gen)

    x = hidden_states.clone().requires_grad_(True)
    output = module(x)  # plain full-sequence forward: no cache_params, no attention_mask
    output.backward(grad_output)

    # Second forward, no grad, with a spy on the chunk rule to record its inputs.
    inner, orig = {}, mod.torch_chunk_gated_delta_rule

    def spy(query, key, value, g, beta, **kw):
        assert kw.get("initial_state") is None and kw.get("use_qk_l2norm_in_kernel") is True, kw
        res = orig(query, key, value, g=g, beta=beta, **kw)
        inner.update(query=query.detach().clone(), key=key.detach().clone(), value=value.detach().clone(),
                     g=g.detach().clone(), beta=beta.detach().clone(), core_out=res[0].detach().clone())
        return res

    mod.torch_chunk_gated_delta_rule = spy
    try:
        with torch.no_grad():
            output2 = module(hidden_states.clone())
    finally:
        mod.torch_chunk_gated_delta_rule = orig
    assert inner, "the chunk rule was not called by the module forward"
    decay = inner["g"].exp().mean(dim=(0, 1))
    print(f"  per-head mean decay exp(g): {[round(x, 4) for x in decay.tolist()]}")
    check_zero("two identical forward runs, output", maxdiff(output, output2))

    rule_args = (inner["query"], inner["key"], inner["value"])
    rule_kw = dict(g=inner["g"], beta=inner["beta"], initial_state=None, output_final_state=True,
                   use_qk_l2norm_in_kernel=True)
    chunk_fn = mod.torch_chunk_gated_delta_rule.__wrapped__
    recurrent_fn = mod.torch_recurrent_gated_delta_rule.__wrapped__
    with torch.no_grad():
        o_c, s_c = chunk_fn(*rule_args, **rule_kw)
        o_r, s_r = recurrent_fn(*rule_args, **rule_kw)
    print(f"  self-check: chunk vs recurrent torch path: max |diff| out = {maxdiff(o_c, o_r):.3e}, "
          f"final state = {maxdiff(s_c, s_r):.3e} (reported only); chunk vs module core = "
          f"{maxdiff(o_c, inner['core_out']):.3e}")

    params = dict(module.named_parameters())
    tensors = {f"param.{n}": p.detach() for n, p in params.items()}
    tensors.update(hidden_states=hidden_states, output=output.detach(), grad_output=grad_output,
                   grad_hidden_states=x.grad)
    for n, p in params.items():
        if p.grad is None:
            raise RuntimeError(f"no gradient for {n}")
        tensors[f"grad.{n}"] = p.grad
    tensors.update({f"inner.{k}": v for k, v in inner.items()}, **{"inner.final_state": s_c})
    write_golden(out_dir, case, tensors, meta(
        hf_class=type(module).__name__, hf_module=mod.__name__, config_class="Qwen3_5TextConfig",
        config_kwargs=cfg_kwargs, layer_idx=layer_idx, hidden_size=config.hidden_size,
        linear_num_key_heads=module.num_k_heads, linear_num_value_heads=module.num_v_heads,
        linear_key_head_dim=module.head_k_dim, linear_value_head_dim=module.head_v_dim,
        linear_conv_kernel_dim=module.conv_kernel_size, conv_dim=module.conv_dim, activation=module.activation,
        beta_scaled_by_2=bool(getattr(module, "allow_neg_eigval", False)), norm_eps=module.norm.variance_epsilon,
        l2norm_eps=1e-6, q_scale="linear_key_head_dim ** -0.5 (after L2 norm)",
        chunk_size=inspect.signature(chunk_fn).parameters["chunk_size"].default,
        head_map="q,k repeat_interleave(Hv // Hk): v-head h uses k-head h // (Hv // Hk)",
        gdn_path="torch_chunk_gated_delta_rule (torch fallback), cache_params=None, attention_mask=None",
        inner_definition=("inputs/outputs of torch_chunk_gated_delta_rule inside the module forward: query/key "
                          "[B,T,Hv,dk] after conv+SiLU and repeat_interleave, BEFORE L2 norm and scale; value "
                          "[B,T,Hv,dv]; g, beta [B,T,Hv]; core_out [B,T,Hv,dv] before the gated norm; final_state "
                          "[B,Hv,dk,dv] (HF [K,V] layout) from the chunk path"),
        grad_definition="grad.* and grad_hidden_states: gradients of sum(output * grad_output)"))
    print_tensors(tensors)


CASES = {
    "olmo_hybrid_tiny": case_olmo_hybrid_tiny,
    "olmo_hybrid_dv2": lambda out: case_olmo_hybrid_tiny(out, "olmo_hybrid_dv2", key_head_dim=8, value_head_dim=16),
    "qwen3_5_gdn": lambda out: gdn_module_case(out, "qwen3_5_gdn", num_k_heads=4, num_v_heads=4),
    "qwen3_5_gdn_grouped": lambda out: gdn_module_case(out, "qwen3_5_gdn_grouped", num_k_heads=2, num_v_heads=4),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="golden root, e.g. tests/golden")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), help="run only these cases")
    args = ap.parse_args()

    import transformers
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_default_dtype(torch.float32)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device cpu, fp32")
    failed = []
    for name in args.only or list(CASES):
        print(f"== {name}")
        try:
            CASES[name](os.path.join(args.out, name))
            print(f"OK {name}")
        except Exception:
            traceback.print_exc()
            print(f"FAILED {name}")
            failed.append(name)
    print(f"{len(failed)} failed: {failed}" if failed else "all cases OK")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
