"""Shared writer for hybridlm golden files (run on the GPU machine, where PyTorch and transformers live).

A golden case is a folder under tests/golden/<case>/ holding:
  - the HF model directory files written by save_pretrained (config.json, model.safetensors, ...) when the case is
    a whole model, or module weights in golden.safetensors when the case is a single module;
  - golden.safetensors: inputs and expected outputs (f32 unless stated), with __metadata__ keys
      format = "hybridlm-golden", version = GOLDEN_FORMAT_VERSION, case, generator, transformers, torch, regenerate.
The C++ tests refuse files whose format/version they do not know, with a message naming the regenerate command.
"""
import os

import torch
from safetensors.torch import save_file

GOLDEN_FORMAT = "hybridlm-golden"
GOLDEN_FORMAT_VERSION = "1"
REGENERATE = "python3 tools/goldens/make_goldens.py --out tests/golden (on the GPU machine)"


def write_golden(case_dir, case, tensors, extra_metadata=None):
    """Writes case_dir/golden.safetensors. tensors: name -> torch tensor (moved to CPU, made contiguous;
    floating tensors stored as f32, integer tensors as given)."""
    import transformers

    os.makedirs(case_dir, exist_ok=True)
    out = {}
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.is_floating_point():
            t = t.to(torch.float32)
        out[name] = t
    metadata = {
        "format": GOLDEN_FORMAT,
        "version": GOLDEN_FORMAT_VERSION,
        "case": case,
        "generator": "tools/goldens/make_goldens.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "regenerate": REGENERATE,
    }
    metadata.update({k: str(v) for k, v in (extra_metadata or {}).items()})
    save_file(out, os.path.join(case_dir, "golden.safetensors"), metadata=metadata)
