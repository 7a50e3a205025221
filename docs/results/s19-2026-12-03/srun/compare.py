#!/usr/bin/env python3
"""Per-step loss and grad-norm differences (relative) and the largest final-weight difference of run B against run A,
as DistTrain's expect_close computes them. Usage: compare.py <run A> <run B>. Standard library only (reads the
safetensors header itself; the tiny model's tensors are F32, little-endian as on x86)."""
import array
import json
import struct
import sys


def steps(run):
    return [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r.get("type") == "step"]


def tensors(run):
    with open(f"{run}/model/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = array.array("f", data[a:b])
    return out


a, b = sys.argv[1], sys.argv[2]
sa, sb = steps(a), steps(b)
assert len(sa) == len(sb) == 8, (len(sa), len(sb))
worst_loss = worst_norm = 0.0
for i, (x, y) in enumerate(zip(sa, sb)):
    dl = abs(x["loss"] - y["loss"]) / abs(x["loss"])
    dn = abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"])
    worst_loss, worst_norm = max(worst_loss, dl), max(worst_norm, dn)
    print(f"step {i + 1}: loss {x['loss']:.9f} vs {y['loss']:.9f} (rel {dl:.3g}), grad norm rel {dn:.3g}")
ta, tb = tensors(a), tensors(b)
assert ta.keys() == tb.keys()
worst_w = max((abs(x - y) for k in ta for x, y in zip(ta[k], tb[k], strict=True)), default=0.0)
print(f"{b} vs {a}: largest differences: loss {worst_loss:.3g} (relative), grad norm {worst_norm:.3g} (relative), "
      f"weight {worst_w:.3g}; loss {sa[0]['loss']:.4f} -> {sa[-1]['loss']:.4f}")
ok = worst_loss <= 1e-6 and worst_norm <= 1e-6 and worst_w <= 1e-6
print("within the mpirun tests' bounds (1e-6 each)" if ok else "OUTSIDE the mpirun tests' bounds (1e-6 each)")
sys.exit(0 if ok else 1)
