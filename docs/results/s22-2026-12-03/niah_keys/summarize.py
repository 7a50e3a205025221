#!/usr/bin/env python3
"""Session 22: the results of run.sh, per (architecture, language, task, length), and the Table 2 layout.

usage: summarize.py WORK OUT_DIR "full_attention standard_periodic"
Reads WORK/config_given.json, WORK/status/<arch> (run.sh's outcome line), the evaluation of each architecture:
WORK/exp/eval/<arch>/{niah.csv, niah_items.jsonl} (the experiment's, final model) or, when its training was cut,
WORK/fallback/<arch>/ (the run mode on the newest checkpoint: the same prompts and settings), and the training
record WORK/exp/runs/<arch>/stage-<k>/{niah_train.json, metrics.jsonl, test.json, checkpoint-*/trainer_state.json}.
Writes OUT_DIR/results.csv: arch, evaluated (final / the checkpoint), lang, task, length, status, n, correct,
accuracy (%), no_number (responses without a number of >= 2 digits: for number tasks the "none" prior of sessions 12,
14 and 18), digits (single and multikey: mean share of the 7 expected digits in place in the answer's first number).
OUT_DIR/results.md: training per stage; per architecture accuracy (rows language, columns length; mean over the
tasks whose cells ran) and the deficit (full attention minus the architecture, points, positive = worse), first over
all four tasks (OneRULER's mean, the experiment's report), then over the three number tasks only (a model that always
answers the none word scores 25 % on the four-task mean with no retrieval); then per task summed over the languages.
"""
import collections, csv, json, os, re, sys

work, out, archs = sys.argv[1], sys.argv[2], sys.argv[3].split()
cfg = json.load(open(os.path.join(work, "config_given.json")))
langs, tasks = cfg["langs"], cfg["eval"]["tasks"]
NUMBER_TASKS = [t for t in tasks if t != "none"]
step_tokens = cfg["train"]["batch_rows"] * cfg["train"]["seq_len"]
planned = [s["tokens"] // step_tokens for s in cfg["train_data"]["stages"]]


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def jsonl(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except OSError:
        return []


def number_runs(text):
    return [r for r in re.findall(r"\d+", text) if len(r) >= 2]


# --- evaluation cells and items per architecture
cells, evaluated, status = {}, {}, {}
items = collections.defaultdict(list)  # (arch, lang, task, length) -> items
for a in archs:
    st = open(os.path.join(work, "status", a)).read().strip() if os.path.exists(os.path.join(work, "status", a)) else "no status"
    status[a] = st
    m = re.match(r"training cut: (\S+) evaluated", st)
    if st.startswith("final model"):
        d, evaluated[a] = os.path.join(work, "exp", "eval", a), "final model"
    elif m:
        d, evaluated[a] = os.path.join(work, "fallback", a), m.group(1)
    else:  # failed, or cut before any checkpoint: nothing of this call to read
        evaluated[a] = "none"
        continue
    p = os.path.join(d, "niah.csv")
    if not os.path.exists(p):
        continue
    for r in csv.DictReader(open(p)):
        cells[(a, r["lang"], r["task"], int(r["length"]))] = r
    for it in jsonl(os.path.join(d, "niah_items.jsonl")):
        items[(a, it["lang"], it["task"], int(it["length"]))].append(it)

lengths = sorted({k[3] for k in cells} | {int(x) if str(x).isdigit() else int(str(x)[:-1]) * 1000 for x in cfg["eval"]["lengths"]})


def acc(a, lang, task, n):
    r = cells.get((a, lang, task, n))
    if r is None or r["status"] != "ok" or int(r["n"]) == 0:
        return None
    return 100.0 * int(r["correct"]) / int(r["n"])


def mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


# --- results.csv
rows = []
for a in archs:
    for n in lengths:
        for lang in langs:
            for t in tasks:
                r = cells.get((a, lang, t, n))
                its = items.get((a, lang, t, n), [])
                no_num = sum(1 for it in its if not number_runs(it["response"])) if its else ""
                dig = ""
                if t in ("single", "multikey") and its:
                    share = []
                    for it in its:
                        e, got = it["expected"][0], (number_runs(it["response"]) or [""])[0]
                        share.append(sum(x == y for x, y in zip(e, got)) / len(e))
                    dig = f"{sum(share) / len(share):.3f}"
                rows.append({"arch": a, "evaluated": evaluated[a], "lang": lang, "task": t, "length": n,
                             "status": r["status"] if r else "not run", "n": r["n"] if r else 0,
                             "correct": r["correct"] if r else 0,
                             "accuracy": f"{acc(a, lang, t, n):.1f}" if acc(a, lang, t, n) is not None else "",
                             "no_number": no_num, "digits": dig})
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["arch"])
    w.writeheader()
    w.writerows(rows)

# --- training per stage
def training_rows(a):
    out_rows = []
    for k, plan in enumerate(planned):
        d = os.path.join(work, "exp", "runs", a, f"stage-{k}")
        marker, test = load(os.path.join(d, "niah_train.json")), load(os.path.join(d, "test.json"))
        steps = [m for m in jsonl(os.path.join(d, "metrics.jsonl")) if m.get("type") == "step"]
        valid = [m for m in jsonl(os.path.join(d, "metrics.jsonl")) if m.get("type") == "valid"]
        if not steps and not marker:
            out_rows.append(f"| {a} | {k + 1} | 0 / {plan} | | | | | | |")
            continue
        last = steps[-1] if steps else {}
        done = marker["steps"] if marker else last.get("step", 0)
        t = (marker or last).get("tokens", 0)
        tokens = f"{t / 1e6:.1f}M" if t >= 1e6 else f"{t / 1e3:.1f}k"
        seconds = f"{marker['seconds']:.0f}" if marker else "(cut)"
        tps = sorted(m["tokens_per_second"] for m in steps if isinstance(m.get("tokens_per_second"), (int, float)))
        med = f"{tps[len(tps) // 2] / 1e3:.0f}k" if tps else ""
        loss = [m["loss"] for m in steps[-8:] if isinstance(m.get("loss"), (int, float))]
        train_ce = f"{sum(loss) / len(loss):.3f}" if loss else ""
        valid_ce = f"{valid[-1]['mean']['ce']:.3f} (step {valid[-1]['step']})" if valid else ""
        test_ce = f"{test['mean']['ce']:.3f}" if test else ""
        out_rows.append(f"| {a} | {k + 1} | {done} / {plan} | {tokens} | {seconds} | {med} | {train_ce} | "
                        f"{valid_ce} | {test_ce} |")
    return out_rows


def fmt(x):
    return "—" if x is None else f"{x:.1f}"


def table(title, a, task_list, deficit=False):
    lines = [f"**{title}**", "", "| language | " + " | ".join(str(n) for n in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    col = collections.defaultdict(list)
    for lang in langs:
        vals = []
        for n in lengths:
            if deficit:
                f_, h = mean(acc(archs[0], lang, t, n) for t in task_list), mean(acc(a, lang, t, n) for t in task_list)
                x = None if f_ is None or h is None else f_ - h
            else:
                x = mean(acc(a, lang, t, n) for t in task_list)
            vals.append(x)
            col[n].append(x)
        lines.append(f"| {lang} | " + " | ".join(fmt(x) for x in vals) + " |")
    lines.append("| **mean** | " + " | ".join(fmt(mean(col[n])) for n in lengths) + " |")
    return lines + [""]


md = [f"# NIAH keys experiment, one device call (session 22; docs/results/s22-2026-12-03/niah_keys)", "",
      f"Config: configs/niah/experiment-gpu-keys.json via make_config.py: stages {planned[0]} + {planned[1]} steps of "
      f"{step_tokens:,} tokens ({planned[0] * step_tokens:,} + {planned[1] * step_tokens:,} per "
      f"architecture), {len(langs)} languages, device {cfg['device']}, {cfg['train']['precision']}; evaluation "
      f"n = {cfg['eval']['n']} per cell, tasks {', '.join(tasks)}.", ""]
md += [f"- {a}: {status[a]} (evaluated: {evaluated[a]})" for a in archs] + [""]
md += ["## Training", "", "| arch | stage | steps / planned | tokens | seconds | median tok/s | train CE (last 8 logged) | "
       "valid answer CE | test CE |", "|---|---|---|---|---|---|---|---|---|"]
for a in archs:
    md += training_rows(a)
md += ["", "## Accuracy (%), mean over the four tasks (Table 2 layout; rows language, columns haystack tokens)", ""]
for a in archs:
    md += table(a, a, tasks)
for a in archs[1:]:
    md += table(f"deficit: {archs[0]} minus {a} (points; positive = the hybrid is worse)", a, tasks, deficit=True)
md += ["## Accuracy (%), number tasks only (" + ", ".join(NUMBER_TASKS) + "): retrieval without the none prior", ""]
for a in archs:
    md += table(a, a, NUMBER_TASKS)
for a in archs[1:]:
    md += table(f"deficit: {archs[0]} minus {a} (points)", a, NUMBER_TASKS, deficit=True)
md += ["## Per task, summed over the languages: correct / n (no number in the answer; digits in place)", "",
       "| arch | task | " + " | ".join(str(n) for n in lengths) + " |", "|---|---|" + "---|" * len(lengths)]
for a in archs:
    for t in tasks:
        ent = []
        for n in lengths:
            c = sum(int(cells[(a, l, t, n)]["correct"]) for l in langs if (a, l, t, n) in cells)
            m = sum(int(cells[(a, l, t, n)]["n"]) for l in langs if (a, l, t, n) in cells)
            its = [it for l in langs for it in items.get((a, l, t, n), [])]
            nn = sum(1 for it in its if not number_runs(it["response"]))
            extra = f" (no number {nn})" if its else ""
            if t in ("single", "multikey") and its:
                share = [sum(x == y for x, y in zip(it["expected"][0], (number_runs(it["response"]) or [""])[0])) / 7
                         for it in its]
                extra = f" (no number {nn}; digits {sum(share) / len(share):.2f})"
            ent.append(f"{c}/{m}{extra}" if m else "—")
        md.append(f"| {a} | {t} | " + " | ".join(ent) + " |")
md += ["", "Trained haystack lengths: 16-32 (stage 1, 2 keys) and 16-256 (stage 2); 1k and 2k are untrained lengths. "
       "Chance for a 7-digit value: digits 0.10; an always-none model scores 25 % on the four-task mean.", ""]
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
print(f"summarize.py: {len(rows)} rows in {out}/results.csv; {out}/results.md")
