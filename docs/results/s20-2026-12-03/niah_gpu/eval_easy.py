#!/usr/bin/env python3
"""Session 20: session 17's eval_easy.py (docs/results/s17-2026-12-03/niahdbg/eval_easy.py) with the binary, the
device and a JSON result as options; the prompts come from easy_data.py (the same documents as make_easy.py's, no
zstd program needed). Greedy answers of a trained model on N fresh examples (--seed 12345, --seq-len 4096, cut after
the question's "<Answer> </Answer>"): exact matches and per-position digit agreement, as eval_easy.py computes them.

usage: eval_easy.py MODEL_DIR N "MAKE_EASY_ARGS" [--bin PATH] [--device cpu|cuda] [--json OUT.json]
  --bin     hybridlm (default: $HLM, else build-niahdbg/hybridlm as eval_easy.py)
  --device  cpu (default; fp32) or cuda (run with --precision fp32, the training precision)
"""
import argparse, json, os, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import easy_data  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("model"); p.add_argument("n", type=int); p.add_argument("easy")
p.add_argument("--bin", default=os.environ.get("HLM", "build-niahdbg/hybridlm"))
p.add_argument("--device", default="cpu"); p.add_argument("--json", default="")
a = p.parse_args()

ea = easy_data.parser().parse_args(["-", "--seq-len", "4096", "--docs", str(a.n), "--seed", "12345", *a.easy.split()])
docs = easy_data.examples(a.n, ea.seed, ea)
reqs, gold = [], []
for t in docs:
    cut = t.index("</Answer>\n<Answer> ") + len("</Answer>")
    reqs.append({"prompt": t[:cut], "max_new_tokens": 32}); gold.append(t[cut:].split("</Answer>")[0].split("<Answer> ")[1].strip())
d = tempfile.mkdtemp()
open(f"{d}/req.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in reqs))
cmd = [a.bin, "generate", a.model, "--tokenizer", "bytes", "--batch", f"{d}/req.jsonl", "--stop", "</Answer>"]
if a.device != "cpu":
    cmd += ["--device", a.device, "--precision", "fp32"]
t0 = time.time()
out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
exact, agree, tot, seen = 0, 0, 0, []
for g, line in zip(gold, out):
    r = json.loads(line)["text"]
    ans = r.split("<Answer>")[-1].split("</Answer>")[0].strip() if "<Answer>" in r else r.strip()
    seen.append(ans); exact += ans == g
    agree += sum(x == y for x, y in zip(ans, g)); tot += len(g)
print(f"exact {exact}/{len(gold)}  digit agreement {agree / tot:.3f}  distinct answers {len(set(seen))}  e.g. "
      + ", ".join(f"{x}/{y}" for x, y in list(zip(seen, gold))[:5]))
if a.json:
    json.dump({"exact": exact, "n": len(gold), "answered": len(out), "digit_agreement": agree / tot,
               "distinct": len(set(seen)), "examples": list(zip(seen, gold))[:8], "generate_s": time.time() - t0,
               "device": a.device}, open(a.json, "w"))
