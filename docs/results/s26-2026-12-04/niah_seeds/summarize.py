#!/usr/bin/env python3
"""Session 26: the results of run.sh over runs (architecture, seed): per cell, per run, and over seeds.

usage: summarize.py WORK OUT_DIR "full_attention standard_periodic reverse_periodic" "1 2 3"
Reads, per seed s, WORK/config-s<s>.json and, per run (a, s), WORK/status/<a>-s<s> (run.sh's outcome line), its
evaluation WORK/exp-s<s>/eval/<a>/{niah.csv, niah_items.jsonl} (the experiment's, final model) or, when its training
was cut, WORK/fallback/<a>-s<s>/ (the run mode on the newest checkpoint: the same prompts and settings), and its
training record WORK/exp-s<s>/runs/<a>/stage-<k>/{niah_train.json, metrics.jsonl, test.json}. A missing, failed or
cut run shows as such (empty cells, "—"); nothing here stops on one.
Writes
  OUT_DIR/results.csv  arch, seed, evaluated (final model / the checkpoint / none), lang, task, length, status, n,
                       correct, accuracy (%), no_number (responses without a number of >= 2 digits: for the number
                       tasks the "none" prior), digits (single and multikey: mean share of the 7 expected digits in
                       place in the answer's first number)
  OUT_DIR/runs.csv     one row per run: status, evaluated model, per stage the steps done and planned, the mean of
                       the last 8 logged train CE, the last validation CE, the test CE and the median tokens/s; the
                       ONSET step: the first logged stage-1 step whose train answer CE (metrics.jsonl "loss" of a
                       "step" record, logged every step) is <= ONSET_CE (empty: never)
  OUT_DIR/results.md   training per run; per architecture how many seeds left the plateau and when; the accuracy
                       (mean over the four tasks, then over the number tasks only) per language x length as the mean
                       over seeds with the min-max range, over all seeds and over the seeds that left the plateau;
                       the deficit (full attention minus each hybrid, mean over seeds); per task summed over
                       languages per run
A cell's task mean needs all its tasks (a partial evaluation leaves it empty rather than averaging fewer tasks), a
language mean all its languages.
"""
import collections, csv, json, os, re, sys

# Stage 1's answer CE sits at ~0.44 on the plateau (2-7-digit values, docs/niah.md session 17) and falls to ~0.02 in
# a run that learned to copy (session 23: reverse periodic 0.11 at step 512, 0.016 at the end): 0.2 is between.
ONSET_CE = 0.2

work, out = sys.argv[1], sys.argv[2]
archs, seeds = sys.argv[3].split(), [int(s) for s in sys.argv[4].split()]


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def jsonl(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []


def number_runs(text):
    return [r for r in re.findall(r"\d+", text) if len(r) >= 2]


def length_of(x):  # 64, "1k" -> 1000 (the niah CSV's lengths)
    s = str(x)
    return int(s[:-1]) * 1000 if s.endswith("k") else int(s)


def length_label(n):
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def mean(v):
    v = list(v)
    return sum(v) / len(v) if v and all(x is not None for x in v) else None


cfgs = {s: load(os.path.join(work, f"config-s{s}.json")) for s in seeds}
cfg0 = next((c for c in cfgs.values() if c), None)
if cfg0 is None:
    sys.exit(f"summarize.py: no config-s<seed>.json in {work}")
langs, tasks = cfg0["langs"], cfg0["eval"]["tasks"]
NUMBER_TASKS = [t for t in tasks if t != "none"]
step_tokens = cfg0["train"]["batch_rows"] * cfg0["train"]["seq_len"]
planned = [s["tokens"] // step_tokens for s in cfg0["train_data"]["stages"]]
runs = [(a, s) for a in archs for s in seeds]

# --- evaluation cells and items per run
cells, evaluated, status = {}, {}, {}
items = collections.defaultdict(list)  # (arch, seed, lang, task, length) -> items
for a, s in runs:
    p = os.path.join(work, "status", f"{a}-s{s}")
    st = open(p).read().strip() if os.path.exists(p) else "no status (not run)"
    status[(a, s)] = st
    m = re.match(r"training cut: (\S+) evaluated", st)
    if st.startswith("final model"):
        d, evaluated[(a, s)] = os.path.join(work, f"exp-s{s}", "eval", a), "final model"
    elif m:
        d, evaluated[(a, s)] = os.path.join(work, "fallback", f"{a}-s{s}"), m.group(1)
    else:  # failed, not run, or cut before any checkpoint: nothing of this call to read
        evaluated[(a, s)] = "none"
        continue
    p = os.path.join(d, "niah.csv")
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            cells[(a, s, r["lang"], r["task"], int(r["length"]))] = r
    for it in jsonl(os.path.join(d, "niah_items.jsonl")):
        items[(a, s, it["lang"], it["task"], int(it["length"]))].append(it)

lengths = sorted({k[4] for k in cells} | {length_of(x) for x in cfg0["eval"]["lengths"]})


def acc(a, s, lang, task, n):
    r = cells.get((a, s, lang, task, n))
    if r is None or r["status"] != "ok" or int(r["n"]) == 0:
        return None
    return 100.0 * int(r["correct"]) / int(r["n"])


def digits_share(its):
    share = [sum(x == y for x, y in zip(it["expected"][0], (number_runs(it["response"]) or [""])[0])) /
             len(it["expected"][0]) for it in its]
    return sum(share) / len(share)


# --- results.csv
rows = []
for a, s in runs:
    for n in lengths:
        for lang in langs:
            for t in tasks:
                r = cells.get((a, s, lang, t, n))
                its = items.get((a, s, lang, t, n), [])
                x = acc(a, s, lang, t, n)
                rows.append({"arch": a, "seed": s, "evaluated": evaluated[(a, s)], "lang": lang, "task": t,
                             "length": n, "status": r["status"] if r else "not run", "n": r["n"] if r else 0,
                             "correct": r["correct"] if r else 0, "accuracy": f"{x:.1f}" if x is not None else "",
                             "no_number": sum(1 for it in its if not number_runs(it["response"])) if its else "",
                             "digits": f"{digits_share(its):.3f}" if t in ("single", "multikey") and its else ""})
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["arch", "seed", "evaluated", "lang", "task", "length", "status", "n", "correct",
                                      "accuracy", "no_number", "digits"])
    w.writeheader()
    w.writerows(rows)


# --- training per run and stage
def stage_record(a, s, k):
    d = os.path.join(work, f"exp-s{s}", "runs", a, f"stage-{k}")
    marker, test = load(os.path.join(d, "niah_train.json")), load(os.path.join(d, "test.json"))
    metrics = jsonl(os.path.join(d, "metrics.jsonl"))
    steps = [m for m in metrics if m.get("type") == "step"]
    valid = [m for m in metrics if m.get("type") == "valid"]
    if not steps and not marker:
        return None
    last = steps[-1] if steps else {}
    tps = sorted(m["tokens_per_second"] for m in steps if isinstance(m.get("tokens_per_second"), (int, float)))
    loss = [m["loss"] for m in steps[-8:] if isinstance(m.get("loss"), (int, float))]
    onset = next((m["step"] for m in steps if isinstance(m.get("loss"), (int, float)) and m["loss"] <= ONSET_CE), None)
    return {"steps": marker["steps"] if marker else last.get("step", 0),
            "tokens": (marker or last).get("tokens", 0),
            "seconds": marker["seconds"] if marker else None,
            "tok_s": tps[len(tps) // 2] if tps else None,
            "ce_last8": sum(loss) / len(loss) if loss else None,
            "valid": (valid[-1]["mean"]["ce"], valid[-1]["step"]) if valid else None,
            "test": test["mean"]["ce"] if test else None,
            "onset": onset}


train = {(a, s, k): stage_record(a, s, k) for a, s in runs for k in range(len(planned))}


def onset_of(a, s):
    r = train[(a, s, 0)]
    return r["onset"] if r else None


def num(x, f="{:.3f}"):
    return "" if x is None else f.format(x)


with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
    w = csv.writer(f)
    head = ["arch", "seed", "status", "evaluated", "onset_step"]
    for k in range(len(planned)):
        head += [f"stage{k + 1}_{x}" for x in ("steps", "planned", "ce_last8_mean", "valid_ce", "test_ce",
                                              "tok_s_median", "seconds")]
    w.writerow(head)
    for a, s in runs:
        row = [a, s, status[(a, s)], evaluated[(a, s)], num(onset_of(a, s), "{}")]
        for k, plan in enumerate(planned):
            r = train[(a, s, k)] or {}
            row += [r.get("steps", 0), plan, num(r.get("ce_last8")), num((r.get("valid") or (None,))[0]),
                    num(r.get("test")), num(r.get("tok_s"), "{:.0f}"), num(r.get("seconds"), "{:.1f}")]
        w.writerow(row)


# --- accuracy over seeds
def cell(a, s, lang, n, task_list):
    return mean(acc(a, s, lang, t, n) for t in task_list)


def lang_mean(a, s, n, task_list):
    return mean(cell(a, s, lang, n, task_list) for lang in langs)


def left(a):
    return [s for s in seeds if onset_of(a, s) is not None]


def fmt(x):
    return "—" if x is None else f"{x:.1f}"


def over_seeds(values):  # values over seeds (None: missing) -> "mean (min–max)" of the present ones, k of n
    v = [x for x in values if x is not None]
    if not v:
        return "—"
    m = sum(v) / len(v)
    if len(v) == 1:
        return f"{m:.1f}" + ("" if len(values) == 1 else f" (1 of {len(values)})")
    rng = f"{min(v):.1f}–{max(v):.1f}"
    return f"{m:.1f} ({rng})" + ("" if len(v) == len(values) else f" ({len(v)} of {len(values)})")


def seed_mean(values):
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


def header(first):
    return [f"| {first} | " + " | ".join(length_label(n) for n in lengths) + " |", "|---|" + "---|" * len(lengths)]


def table(title, a, sel, task_list):
    if not sel:
        return [f"**{title}**: no seed", ""]
    lines = [f"**{title}** (seeds {', '.join(map(str, sel))})", ""] + header("language")
    for lang in langs:
        lines.append(f"| {lang} | " + " | ".join(over_seeds([cell(a, s, lang, n, task_list) for s in sel])
                                                 for n in lengths) + " |")
    lines.append("| **mean** | " + " | ".join(over_seeds([lang_mean(a, s, n, task_list) for s in sel])
                                               for n in lengths) + " |")
    return lines + [""]


def deficit_table(title, h, task_list):
    base = archs[0]
    lines = [f"**{title}**", ""] + header("language")

    def d(f):
        x, y = seed_mean(f(base, s) for s in seeds), seed_mean(f(h, s) for s in seeds)
        return None if x is None or y is None else x - y
    for lang in langs:
        lines.append(f"| {lang} | " + " | ".join(fmt(d(lambda a, s: cell(a, s, lang, n, task_list))) for n in lengths)
                     + " |")
    lines.append("| **mean** | " + " | ".join(fmt(d(lambda a, s: lang_mean(a, s, n, task_list))) for n in lengths)
                 + " |")
    return lines + [""]


def summary_table(task_list):
    lines = header("architecture (seeds)")
    for a in archs:
        for label, sel in (("all", seeds), ("left the plateau", left(a))):
            if sel:
                lines.append(f"| {a} ({label}: {', '.join(map(str, sel))}) | " +
                             " | ".join(over_seeds([lang_mean(a, s, n, task_list) for s in sel]) for n in lengths)
                             + " |")
    return lines + [""]


md = ["# NIAH keys experiment, several seeds per architecture, one device call (session 26; "
      "docs/results/s26-2026-12-04/niah_seeds)", "",
      f"Config: configs/niah/experiment-gpu-keys-lr1e-3.json via make_config.py, one experiment per seed (seeds "
      f"{', '.join(map(str, seeds))}: train.init_seed = train.data_seed = the seed; the examples are the same): "
      f"stages {planned[0]} + {planned[1]} steps of {step_tokens:,} tokens per run, "
      f"{cfg0['model'].get('num_hidden_layers')} layers of hidden {cfg0['model'].get('hidden_size')}, "
      f"lr {cfg0['train'].get('lr')}, {len(langs)} languages, device {cfg0['device']}, {cfg0['train']['precision']}; "
      f"evaluation n = {cfg0['eval']['n']} per cell, tasks {', '.join(tasks)}, lengths "
      f"{', '.join(length_label(n) for n in lengths)}. Accuracy cells over seeds: mean (min–max), "
      f"\"(k of n)\" when only k seeds have the cell.", ""]
md += [f"- {a} seed {s}: {status[(a, s)]} (evaluated: {evaluated[(a, s)]})" for a, s in runs] + [""]

md += [f"## Leaving the plateau (onset: the first stage-1 step with train answer CE <= {ONSET_CE})", "",
       "| architecture | left the plateau | onset step per seed (—: not by the step given) | stage-1 train CE at its "
       "end per seed (last 8 logged) |", "|---|---|---|---|"]
for a in archs:
    ran = [s for s in seeds if train[(a, s, 0)]]
    per, ce = [], []
    for s in seeds:
        r = train[(a, s, 0)]
        if r is None:
            per.append(f"s{s}: no record")
            continue
        cut = "" if r["steps"] >= planned[0] else ", cut"
        per.append(f"s{s}: {r['onset']}" if r["onset"] is not None else f"s{s}: — ({r['steps']} steps{cut})")
        ce.append(f"s{s}: {num(r['ce_last8'])}")
    md.append(f"| {a} | {len(left(a))} of {len(ran)} seeds | {'; '.join(per)} | {'; '.join(ce)} |")
md += [""]

md += ["## Summary: accuracy (%), mean over the languages; over seeds mean (min–max)", "",
       "**Mean over the four tasks**", ""] + summary_table(tasks)
md += [f"**Number tasks only ({', '.join(NUMBER_TASKS)})**", ""] + summary_table(NUMBER_TASKS)

md += ["## Training", "", "| arch | seed | stage | steps / planned | tokens | seconds | median tok/s | train CE (last 8 "
       "logged) | valid answer CE | test CE | onset |", "|---|---|---|---|---|---|---|---|---|---|---|"]
for a, s in runs:
    for k, plan in enumerate(planned):
        r = train[(a, s, k)]
        if r is None:
            md.append(f"| {a} | {s} | {k + 1} | 0 / {plan} | | | | | | | |")
            continue
        t = r["tokens"]
        tokens = f"{t / 1e6:.1f}M" if t >= 1e6 else f"{t / 1e3:.1f}k"
        valid = f"{r['valid'][0]:.3f} (step {r['valid'][1]})" if r["valid"] else ""
        tok_s = num(r["tok_s"] and r["tok_s"] / 1e3, "{:.0f}k")
        md.append(f"| {a} | {s} | {k + 1} | {r['steps']} / {plan} | {tokens} | {num(r['seconds'], '{:.0f}') or '(cut)'} | "
                  f"{tok_s} | {num(r['ce_last8'])} | {valid} | {num(r['test'])} | "
                  f"{num(r['onset'], '{}') if k == 0 else ''} |")
md += [""]

md += ["## Accuracy (%), mean over the four tasks (rows language, columns haystack tokens; over seeds mean (min–max))",
       ""]
for a in archs:
    md += table(f"{a}, all seeds", a, seeds, tasks)
    md += table(f"{a}, seeds that left the plateau", a, left(a), tasks)
for h in archs[1:]:
    md += deficit_table(f"deficit: {archs[0]} minus {h} (points, mean over seeds; positive = the hybrid is worse)", h,
                        tasks)
md += [f"## Accuracy (%), number tasks only ({', '.join(NUMBER_TASKS)}): retrieval without the none prior", ""]
for a in archs:
    md += table(f"{a}, all seeds", a, seeds, NUMBER_TASKS)
    md += table(f"{a}, seeds that left the plateau", a, left(a), NUMBER_TASKS)
for h in archs[1:]:
    md += deficit_table(f"deficit: {archs[0]} minus {h} (points, mean over seeds)", h, NUMBER_TASKS)

md += ["## Per task and run, summed over the languages: correct / n (no number in the answer; digits in place)", "",
       "| arch | seed | task | " + " | ".join(length_label(n) for n in lengths) + " |",
       "|---|---|---|" + "---|" * len(lengths)]
for a, s in runs:
    for t in tasks:
        ent = []
        for n in lengths:
            present = [l for l in langs if (a, s, l, t, n) in cells]
            c = sum(int(cells[(a, s, l, t, n)]["correct"]) for l in present)
            m = sum(int(cells[(a, s, l, t, n)]["n"]) for l in present)
            its = [it for l in langs for it in items.get((a, s, l, t, n), [])]
            extra = ""
            if its:
                nn = sum(1 for it in its if not number_runs(it["response"]))
                extra = f" (no number {nn}" + (f"; digits {digits_share(its):.2f}" if t in ("single", "multikey")
                                               else "") + ")"
            ent.append(f"{c}/{m}{extra}" if m else "—")
        md.append(f"| {a} | {s} | {t} | " + " | ".join(ent) + " |")
md += ["", "Trained haystack lengths: 16-32 (stage 1, 2 keys, single and multikey only) and 16-256 (stage 2, the four "
       "tasks); longer lengths are untrained. A run evaluated at a stage-1 model never trained multiquery or none. "
       "Chance for a 7-digit value: digits 0.10; an always-none model scores 25 % on the four-task mean.", ""]
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
print(f"summarize.py: {len(rows)} rows in {out}/results.csv, {len(runs)} runs in {out}/runs.csv; {out}/results.md")
