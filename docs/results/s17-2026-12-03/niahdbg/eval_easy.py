#!/usr/bin/env python3
"""Session 17: greedy answers of a model trained by rung.sh on fresh make_easy.py examples (another seed).
usage: eval_easy.py MODEL_DIR N "MAKE_EASY_ARGS"  -> exact-match rate and per-position digit agreement."""
import json, os, subprocess, sys, tempfile
model, n, easy = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
d = tempfile.mkdtemp()
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([sys.executable, f"{here}/make_easy.py", d, "--seq-len", "4096", "--docs", str(n), "--seed", "12345", *easy],
               check=True, stdout=subprocess.DEVNULL)
docs = [json.loads(l)["text"] for l in subprocess.run(["zstdcat", f"{d}/eng_Latn.jsonl.zst"], capture_output=True,
                                                       text=True, check=True).stdout.splitlines()]
reqs, gold = [], []
for t in docs:
    cut = t.index("</Answer>\n<Answer> ") + len("</Answer>")
    reqs.append({"prompt": t[:cut], "max_new_tokens": 32}); gold.append(t[cut:].split("</Answer>")[0].split("<Answer> ")[1].strip())
open(f"{d}/req.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in reqs))
out = subprocess.run(["build-niahdbg/hybridlm", "generate", model, "--tokenizer", "bytes", "--batch", f"{d}/req.jsonl",
                      "--stop", "</Answer>"], capture_output=True, text=True, check=True).stdout.splitlines()
exact, agree, tot, seen = 0, 0, 0, []
for g, line in zip(gold, out):
    r = json.loads(line)["text"]
    ans = r.split("<Answer>")[-1].split("</Answer>")[0].strip() if "<Answer>" in r else r.strip()
    seen.append(ans); exact += ans == g
    agree += sum(a == b for a, b in zip(ans, g)); tot += len(g)
print(f"exact {exact}/{len(gold)}  digit agreement {agree / tot:.3f}  distinct answers {len(set(seen))}  e.g. "
      + ", ".join(f"{a}/{g}" for a, g in list(zip(seen, gold))[:5]))
