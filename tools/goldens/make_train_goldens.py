#!/usr/bin/env python3
"""Gradient goldens for hybridlm's training engine: losses and every parameter gradient from torch autograd.

    python3 tools/goldens/make_train_goldens.py --golden tests/golden [--only CASE ...]

Run on the GPU machine (PyTorch + transformers 5.x) AFTER make_goldens.py and make_gdn_goldens.py: the models are
the committed tiny HF models under tests/golden/ (loaded in float32 on the CPU, eager attention, HF's torch GDN path),
so the C++ side loads exactly the same weights. Each case writes tests/golden/<case>/golden.safetensors with:
    input_ids     int64 [2, 19]      the input_ids of tests/golden/qwen3_untied (two sequences, no padding)
    loss          f32 [1]            the scalar loss that was differentiated
    per_token     f32 [2, 19]        per-token loss (CE: position t predicts input_ids[t+1]; the last position of each
                                     sequence has no target and holds 0; KL: every position)
    grad.<name>   f32                d loss / d parameter, <name> the canonical (HF state_dict) name
Losses:
    ce:  mean over the 2·18 predicted positions of -log softmax(logits)[target]
    kl:  tau² · mean over all 2·19 positions of KL(p_T || p_S), p = softmax(logits / tau); teacher frozen
OLMo-Hybrid keeps one fused conv1d.weight [2·Ck + Cv, 1, K] in memory; its gradient is written split into the saved
names linear_attn.{q,k,v}_conv1d.weight as the checkpoint stores them.
"""
import argparse
import json
import os
import sys
import traceback

for _k, _v in (("USE_HUB_KERNELS", "0"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_k, _v)
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import write_golden  # noqa: E402

# case -> (loss, student dir, teacher dir or None, tau)
CASES = {
    "train_ce_qwen3_untied": ("ce", "qwen3_untied", None, 1.0),
    "train_ce_granite": ("ce", "granite", None, 1.0),
    "train_ce_olmo_hybrid": ("ce", "olmo_hybrid_tiny", None, 1.0),
    "train_kl_qwen3_tied": ("kl", "qwen3_tied", "qwen3_untied", 1.0),
    "train_kl_olmo_hybrid": ("kl", "olmo_hybrid_tiny", "qwen3_untied", 2.0),
}


def load(golden, name):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.join(golden, name), dtype=torch.float32,
                                                 attn_implementation="eager", local_files_only=True)
    return model.train(False)  # no dropout; gradients still flow


def input_ids(golden):
    from safetensors.torch import load_file
    return load_file(os.path.join(golden, "qwen3_untied", "golden.safetensors"))["input_ids"]


def canonical_grads(model):
    """Parameter gradients under the checkpoint's names (OLMo's fused conv split back into q/k/v)."""
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            raise RuntimeError(f"{name} received no gradient")
        g = p.grad.detach().clone()
        if name.endswith("linear_attn.conv1d.weight"):
            attn = model.get_submodule(name[: -len(".conv1d.weight")])
            ck, cv = attn.key_dim, attn.value_dim
            q, k, v = torch.split(g, [ck, ck, cv], dim=0)
            prefix = name[: -len("conv1d.weight")]
            out[f"grad.{prefix}q_conv1d.weight"] = q
            out[f"grad.{prefix}k_conv1d.weight"] = k
            out[f"grad.{prefix}v_conv1d.weight"] = v
        else:
            out[f"grad.{name}"] = g
    # Tied heads: one parameter (embed_tokens) carries both uses' gradient, as hybridlm's embedding does.
    return out


def run_case(case, golden):
    kind, student_name, teacher_name, tau = CASES[case]
    ids = input_ids(golden)
    student = load(golden, student_name)
    student.zero_grad(set_to_none=True)
    logits = student(input_ids=ids, use_cache=False).logits.float()  # [B, T, V]
    B, T, V = logits.shape
    per_token = torch.zeros(B, T, dtype=torch.float64)
    if kind == "ce":
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        nll = -logp.gather(-1, ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
        loss = nll.mean()
        per_token[:, :-1] = nll.detach().double()
    else:
        teacher = load(golden, teacher_name)
        with torch.no_grad():
            t_logits = teacher(input_ids=ids, use_cache=False).logits.float()
        log_pt = torch.log_softmax(t_logits / tau, dim=-1)
        log_ps = torch.log_softmax(logits / tau, dim=-1)
        kl = (log_pt.exp() * (log_pt - log_ps)).sum(-1)  # [B, T]
        loss = tau * tau * kl.mean()
        per_token[:] = (tau * tau * kl).detach().double()
    loss.backward()
    tensors = {"input_ids": ids, "loss": loss.detach().reshape(1), "per_token": per_token.float(),
               **canonical_grads(student)}
    import transformers
    write_golden(os.path.join(golden, case), case, tensors, extra_metadata={
        "generator_script": "tools/goldens/make_train_goldens.py", "loss": kind, "tau": tau,
        "student": student_name, "teacher": teacher_name or "",
        "reduction": "mean over predicted positions" if kind == "ce" else "tau^2 * mean over all positions",
        "transformers_version": transformers.__version__})
    norm = sum(float(v.double().pow(2).sum()) for k, v in tensors.items() if k.startswith("grad.")) ** 0.5
    print(f"[OK] {case}: loss {loss.item():.6f}, {len(tensors) - 3} gradients, global grad norm {norm:.6f}",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--golden", required=True, help="tests/golden (holds the tiny models; cases written there)")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES))
    args = parser.parse_args()
    torch.manual_seed(0)
    failed = []
    for case in args.only or list(CASES):
        try:
            run_case(case, args.golden)
        except Exception:
            failed.append(case)
            print(f"[FAILED] {case}:\n{traceback.format_exc()}", flush=True)
    total = len(args.only or CASES)
    print(f"{total - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
