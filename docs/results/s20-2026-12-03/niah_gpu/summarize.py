#!/usr/bin/env python3
"""Session 20: one CSV and one Markdown table over the main runs of run.sh.

usage: summarize.py WORK OUT_DIR
Reads WORK/manifest.tsv (name rung arch seed expdir rows planned_steps; tab-separated) and per run WORK/runs/<name>/
{train.log.json, rc ("rc wall_s"), eval.json, evaluated} and <expdir>/runs/<arch>/{test.json, niah_train.json};
writes OUT_DIR/results.csv and OUT_DIR/results.md (the table, the sizing and the calibration rates).
status: ok, timeout (rc 124/137: cut by its time limit; no final model and no test CE; its newest checkpoint, if
any, is what was evaluated: column "evaluated"), failed (rc N), or eval_failed.
"""
import csv, json, os, sys

work, out = sys.argv[1], sys.argv[2]


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


rows = []
for line in open(os.path.join(work, "manifest.tsv")):
    name, rung, arch, seed, expdir, nrows, planned = line.rstrip("\n").split("\t")
    d = os.path.join(work, "runs", name)
    log = load(os.path.join(d, "train.log.json")) or {}
    rcw = open(os.path.join(d, "rc")).read().split() if os.path.exists(os.path.join(d, "rc")) else ["?", ""]
    test = load(os.path.join(expdir, "runs", arch, "test.json"))
    marker = load(os.path.join(expdir, "runs", arch, "niah_train.json")) or {}
    ev = load(os.path.join(d, "eval.json"))
    evaluated = open(os.path.join(d, "evaluated")).read().strip() if os.path.exists(os.path.join(d, "evaluated")) else ""
    steps = marker.get("steps", log.get("last_step", 0))
    rc = rcw[0]
    status = "ok" if rc == "0" else "timeout" if rc in ("124", "137") else f"failed (rc {rc})"
    if status == "ok" and ev is None:
        status = "eval_failed"
    rows.append({
        "rung": rung, "architecture": arch, "seed": seed, "steps": steps, "planned_steps": int(planned),
        "examples": int(steps) * int(nrows),
        "final_train_ce": None if log.get("final_ce_mean5") is None else round(log["final_ce_mean5"], 5),
        "test_ce": None if test is None else round(test["mean"]["ce"], 5),
        "exact": None if ev is None else ev["exact"], "n_eval": None if ev is None else ev["n"],
        "digit_agreement": None if ev is None else round(ev["digit_agreement"], 3),
        "distinct_answers": None if ev is None else ev["distinct"], "evaluated": evaluated,
        "train_s": None if not marker else round(marker.get("seconds", 0), 1),
        "wall_s": rcw[1] if len(rcw) > 1 else "",
        "ms_per_step": None if "s_per_step" not in log else round(1000 * log["s_per_step"], 2),
        "status": status})

os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["rung"])
    w.writeheader()
    w.writerows(rows)

fmt = lambda v: "–" if v is None or v == "" else str(v)
md = ["| rung | architecture | seed | steps | examples | final train CE (mean of last 5 logged) | test CE | exact | "
      "digit agreement | distinct answers | evaluated | wall s (process) | ms/step (shared GPU) | status |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
for r in rows:
    exact = "–" if r["exact"] is None else f"{r['exact']}/{r['n_eval']}"
    md.append(f"| {r['rung']} | {r['architecture']} | {r['seed']} | {r['steps']:,} | {r['examples']:,} | "
              f"{fmt(r['final_train_ce'])} | {fmt(r['test_ce'])} | {exact} | {fmt(r['digit_agreement'])} | "
              f"{fmt(r['distinct_answers'])} | {fmt(r['evaluated'])} | {fmt(r['wall_s'])} | {fmt(r['ms_per_step'])} | {r['status']} |")
sizing = load(os.path.join(work, "sizing.json"))
if sizing:
    md += ["", "Sizing (sizing.py): " + json.dumps({k: v for k, v in sizing.items() if k != "calibration"})]
    md += ["", "| calibration run | steps reached | s/step (all training) | s/step (own lines) | start-up s |",
           "|---|---:|---:|---:|---:|"]
    for k, v in sizing.get("calibration", {}).items():
        md.append(f"| {k} | {v['steps']} | {v['s_per_step']:.5f} | {v['s_per_step_own_lines']:.5f} | {v['startup_s']} |")
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
