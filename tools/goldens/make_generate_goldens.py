#!/usr/bin/env python3
"""Greedy generation goldens for `hybridlm generate` (issue #18 item 3b): HF transformers `generate` ids.

Run on the GPU machine (PyTorch, transformers 5.x with olmo_hybrid, safetensors; no internet), from the repository
root, after building hybridlm (the student case converts a teacher with it and checks the torch student against it):
    python3 tools/goldens/make_generate_goldens.py --out tests/golden --hybridlm build/hybridlm [--only CASE ...]

Cases (each writes tests/golden/<case>/golden.safetensors; the student case also its model directory):
    generate_qwen3         tests/golden/qwen3_untied (Qwen3ForCausalLM, biases, rope theta 1e6) with HF generate
    generate_olmo_hybrid   tests/golden/olmo_hybrid_tiny (OlmoHybridForCausalLM: GDN layers via HF's torch fallback
                           path — chunked prefill, recurrent decode — plus post-norm attention) with HF generate
    generate_granitemoehybrid  tests/golden/granitemoehybrid_tiny (GraniteMoeHybridForCausalLM: Mamba-2 layers via
                           HF's torch path — chunked SSD prefill with mamba_chunk_size 8 (the 23-token prompt spans 3
                           chunks), one-token state updates in decode — plus NoPE attention) with HF generate
    generate_student       a qwen3_hybrid student converted by `hybridlm convert` from tests/golden/qwen3_tied
                           (layer 0 GDN with negative eigenvalues, layer 1 attention). HF has no qwen3_hybrid class, so
                           the reference is HF's Qwen3ForCausalLM with the GDN layer's self_attn replaced by HF's
                           OlmoHybridGatedDeltaNet (o_norm eps = rms_norm_eps, as the student defines it), generated
                           greedily by full forwards without a cache. Before writing, its prompt logits are checked
                           against `hybridlm run --dump` (max |diff| <= 1e-4), so the reference is the student's math.
golden.safetensors holds, for each prompt p of the case (two prompts, 7 and 23 tokens, random ids, seeded):
    prompt.<p>     int64 [L_p]     the prompt ids
    generated.<p>  int64 [N]       the N = 40 greedy ids after it (EOS disabled: eos_token_id None, min_new_tokens N)
and metadata model_dir (the model folder, relative to the golden's folder), max_new_tokens, prompts. Every case also
recomputes its ids by greedy full forwards without a cache and records whether they equal generate's
(`cache_free_greedy_equal`); a mismatch is printed (it would mean HF's cache path disagrees with its own forward).
CPU, float32, eager attention, fixed seeds: reruns give identical files.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

for _k, _v in (("USE_HUB_KERNELS", "0"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_k, _v)
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, fp32

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402

GENERATOR = "tools/goldens/make_generate_goldens.py"
REGENERATE = "python3 tools/goldens/make_generate_goldens.py --out tests/golden --hybridlm build/hybridlm (GPU machine)"
NEW_TOKENS = 40
PROMPT_LENGTHS = (7, 23)
SEED = 4242
STUDENT_TEACHER = "qwen3_tied"
STUDENT_CONVERT_ARGS = ["--placement", "1", "--neg-eigval", "--seed", "7"]


def prompts(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int64) for n in PROMPT_LENGTHS]


def greedy_no_cache(model, prompt):
    seq = prompt.unsqueeze(0)
    for _ in range(NEW_TOKENS):
        logits = model(input_ids=seq, use_cache=False).logits[0, -1]
        seq = torch.cat([seq, logits.argmax().view(1, 1)], dim=1)  # argmax: first index on ties, as hybridlm
    return seq[0, prompt.numel():]


def hf_generate(model, prompt):
    out = model.generate(input_ids=prompt.unsqueeze(0), attention_mask=torch.ones(1, prompt.numel(), dtype=torch.long),
                         do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None,
                         pad_token_id=0, use_cache=True)
    return out[0, prompt.numel():]


def write_case(out_dir, case, model_dir_rel, prompt_ids, generated, extra):
    tensors = {}
    for p, (ids, gen) in enumerate(zip(prompt_ids, generated)):
        tensors[f"prompt.{p}"] = ids
        tensors[f"generated.{p}"] = gen
    meta = {"model_dir": model_dir_rel, "max_new_tokens": NEW_TOKENS, "prompts": len(prompt_ids),
            "generator": GENERATOR, "regenerate": REGENERATE, **extra}  # overrides write_golden's defaults
    golden_io.write_golden(os.path.join(out_dir, case), case, tensors, extra_metadata=meta)


def hf_case(out_dir, case, model_folder, cls_name):
    import transformers
    cls = getattr(transformers, cls_name)
    model_dir = os.path.join(out_dir, model_folder)
    model = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                local_files_only=True).eval()
    ps = prompts(model.config.vocab_size, SEED + len(case))
    generated, equal = [], True
    for prompt in ps:
        g = hf_generate(model, prompt)
        ref = greedy_no_cache(model, prompt)
        if not torch.equal(g, ref):
            equal = False
            first = int((g != ref).nonzero()[0])
            print(f"  WARNING {case}: generate (cache) and greedy full forwards differ from new token {first}")
        generated.append(g)
    write_case(out_dir, case, os.path.join("..", model_folder), ps, generated,
               {"hf_class": cls_name, "cache_free_greedy_equal": equal})
    print(f"[OK] {case}: {[list(map(int, g[:8])) for g in generated]}... cache-free greedy equal: {equal}")


def build_student(hybridlm, out_dir, student_dir):
    teacher = os.path.join(out_dir, STUDENT_TEACHER)
    if os.path.isdir(student_dir):
        shutil.rmtree(student_dir)
    subprocess.run([hybridlm, "convert", "--teacher", teacher, "--out", student_dir, *STUDENT_CONVERT_ARGS],
                   check=True)


def torch_student(student_dir):
    """HF Qwen3ForCausalLM with its GDN layers' self_attn replaced by HF's OlmoHybridGatedDeltaNet."""
    import json

    from safetensors.torch import load_file
    from transformers import OlmoHybridConfig, Qwen3Config, Qwen3ForCausalLM
    from transformers.models.olmo_hybrid import modeling_olmo_hybrid as olmo

    cfg = json.load(open(os.path.join(student_dir, "config.json")))
    qwen_keys = {k: v for k, v in cfg.items() if not k.startswith("linear_") and k not in ("model_type", "layer_types")}
    qcfg = Qwen3Config(**qwen_keys, attn_implementation="eager")
    model = Qwen3ForCausalLM(qcfg).float().eval()
    weights = load_file(os.path.join(student_dir, "model.safetensors"))
    ocfg = OlmoHybridConfig(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], rms_norm_eps=cfg["rms_norm_eps"],
        layer_types=cfg["layer_types"],  # HF's config validation wants at least one attention layer, as here
        linear_num_key_heads=cfg["linear_num_key_heads"], linear_num_value_heads=cfg["linear_num_value_heads"],
        linear_key_head_dim=cfg["linear_key_head_dim"], linear_value_head_dim=cfg["linear_value_head_dim"],
        linear_conv_kernel_dim=cfg.get("linear_conv_kernel_dim", 4),
        linear_allow_neg_eigval=cfg.get("linear_allow_neg_eigval", False))

    class GdnAsSelfAttn(torch.nn.Module):  # the decoder layer calls self_attn(hidden_states=..., ...)
        def __init__(self, gdn):
            super().__init__()
            self.gdn = gdn

        def forward(self, hidden_states, **_):
            out = self.gdn(hidden_states=hidden_states)
            return (out[0] if isinstance(out, tuple) else out), None

    for i, kind in enumerate(cfg["layer_types"]):
        if kind != "linear_attention":
            continue
        gdn = olmo.OlmoHybridGatedDeltaNet(ocfg, layer_idx=i).float()
        gdn.o_norm.variance_epsilon = cfg["rms_norm_eps"]  # the student's gated norm eps (docs: qwen3_hybrid)
        prefix = f"model.layers.{i}.linear_attn."
        own = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
        own["conv1d.weight"] = torch.cat([own.pop("q_conv1d.weight"), own.pop("k_conv1d.weight"),
                                          own.pop("v_conv1d.weight")], dim=0)
        gdn.load_state_dict(own, strict=True)
        model.model.layers[i].self_attn = GdnAsSelfAttn(gdn)
    rest = {k: v for k, v in weights.items() if ".linear_attn." not in k}
    result = model.load_state_dict(rest, strict=False)
    bad_missing = [k for k in result.missing_keys
                   if not any(k.startswith(f"model.layers.{i}.self_attn.gdn.") for i in range(cfg["num_hidden_layers"]))
                   and not (k == "lm_head.weight" and cfg.get("tie_word_embeddings"))]
    if bad_missing or result.unexpected_keys:
        raise RuntimeError(f"student weights: missing {bad_missing}, unexpected {result.unexpected_keys}")
    if cfg.get("tie_word_embeddings"):
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval(), cfg


def hybridlm_logits(hybridlm, model_dir, ids):
    from safetensors.torch import load_file
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dump.safetensors")
        subprocess.run([hybridlm, "run", model_dir, "--ids", ",".join(str(int(i)) for i in ids), "--dump", dump,
                        "--points", "logits"], check=True, stdout=subprocess.DEVNULL)
        return load_file(dump)["logits"]


def student_case(out_dir, case, hybridlm):
    if not hybridlm:
        raise RuntimeError("generate_student needs --hybridlm PATH (to convert the teacher and check the reference)")
    case_dir = os.path.join(out_dir, case)
    student_dir = os.path.join(case_dir, "model")
    build_student(hybridlm, out_dir, student_dir)
    model, cfg = torch_student(student_dir)
    ps = prompts(cfg["vocab_size"], SEED + len(case))
    worst = 0.0
    for prompt in ps:
        ours = hybridlm_logits(hybridlm, student_dir, prompt)
        ref = model(input_ids=prompt.unsqueeze(0), use_cache=False).logits[0]
        worst = max(worst, (ours - ref).abs().max().item())
    print(f"  torch student vs hybridlm run: max |logit diff| = {worst:.3e}")
    if worst > 1e-4:
        raise RuntimeError("the torch student does not compute the hybridlm student's forward")
    generated = [greedy_no_cache(model, p) for p in ps]
    write_case(out_dir, case, "model", ps, generated,
               {"reference": "Qwen3ForCausalLM + OlmoHybridGatedDeltaNet, greedy full forwards (no cache)",
                "teacher": STUDENT_TEACHER, "convert_args": " ".join(STUDENT_CONVERT_ARGS),
                "student_vs_hybridlm_max_logit_diff": worst})
    print(f"[OK] {case}: {[list(map(int, g[:8])) for g in generated]}...")


CASES = {
    "generate_qwen3": lambda out, hyb: hf_case(out, "generate_qwen3", "qwen3_untied", "Qwen3ForCausalLM"),
    "generate_olmo_hybrid": lambda out, hyb: hf_case(out, "generate_olmo_hybrid", "olmo_hybrid_tiny",
                                                     "OlmoHybridForCausalLM"),
    "generate_granitemoehybrid": lambda out, hyb: hf_case(out, "generate_granitemoehybrid", "granitemoehybrid_tiny",
                                                          "GraniteMoeHybridForCausalLM"),
    "generate_student": lambda out, hyb: student_case(out, "generate_student", hyb),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the golden folder, e.g. tests/golden (models are read there)")
    parser.add_argument("--hybridlm", help="path of the hybridlm binary (needed by generate_student)")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="cases to write (default: all)")
    args = parser.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    torch.set_grad_enabled(False)
    failed = []
    for case in args.only or list(CASES):
        try:
            CASES[case](args.out, args.hybridlm)
        except Exception:
            failed.append(case)
            print(f"[FAILED] {case}:\n{traceback.format_exc()}", flush=True)
    print(f"{len(args.only or CASES) - len(failed)} passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
