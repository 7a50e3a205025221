#!/usr/bin/env python3
"""Session 20: step counts of the main runs from the calibration runs' rates (run.sh's phase 2).

usage: sizing.py WORK ELAPSED_S BUDGET_S RESERVE_S K2_TARGET K4_TARGET MIN_STEPS [TAIL_S] > WORK/sizing.json
Reads WORK/cal/<name>/train.log.json (logfilter.py: start_s, and its progress lines' (seconds, step) points). The
calibration ran the main phase's processes at once for a fixed time (then `timeout` ended them), so:
  s/step   of each process over the window in which every calibration process was between its first and its
           last progress line (all of them training at once, as in the main phase), else over its own lines
  startup  max over processes of (launch to step 0): CUDA context, corpus load, first validation
  avail    = BUDGET_S - ELAPSED_S - RESERVE_S - startup - TAIL_S (5: final validation, test, the 1-sample
             evaluation cell, reports) - 10 s
and each rung gets S = min(target, 0.9 * avail / (its slowest process's s/step)), rounded down to a multiple of 40,
at least MIN_STEPS. Conservative: the faster architectures finish first and leave the GPU to the slower ones.
"""
import glob, json, os, sys

work, elapsed, budget, reserve = sys.argv[1], *map(float, sys.argv[2:5])
targets = {"K2": int(sys.argv[5]), "K4": int(sys.argv[6])}
min_steps = int(sys.argv[7])
tail = float(sys.argv[8]) if len(sys.argv) > 8 else 5.0


def at(points, t):
    """Step reached at time t, linear between the progress lines."""
    for (t1, s1), (t2, s2) in zip(points, points[1:]):
        if t1 <= t <= t2:
            return s1 + (s2 - s1) * (t - t1) / max(t2 - t1, 1e-9)
    return None


logs, per, startup = {}, {}, 0.0
for d in sorted(glob.glob(os.path.join(work, "cal", "*"))):
    name = os.path.basename(d)
    try:
        s = json.load(open(os.path.join(d, "train.log.json")))
    except (OSError, ValueError):
        continue
    if "s_per_step" not in s:
        continue
    logs[name] = s
    # launch to step 0: the first line's time less the steps it reports
    up = s["points"][0][0] - s["start_s"] - s["points"][0][1] * s["s_per_step"]
    per[name] = {"s_per_step": s["s_per_step"], "s_per_step_own_lines": s["s_per_step"], "steps": s["last_step"],
                 "startup_s": round(up, 2)}
    startup = max(startup, up)
lo = max((s["points"][0][0] for s in logs.values()), default=0)
hi = min((s["points"][-1][0] for s in logs.values()), default=0)
for name, s in logs.items():
    a, b = at(s["points"], lo), at(s["points"], hi)
    per[name]["window_s"] = [round(lo, 2), round(hi, 2)]
    if hi - lo >= 1.0 and a is not None and b is not None and b > a:
        per[name]["s_per_step"] = (hi - lo) / (b - a)
avail = budget - elapsed - reserve - startup - tail - 10
out = {"elapsed_s": elapsed, "startup_s": round(startup, 2), "tail_s": tail, "avail_s": round(avail, 1),
       "window_s": round(hi - lo, 2), "calibration": per, "steps": {}}
for rung, target in targets.items():
    rates = [v["s_per_step"] for k, v in per.items() if k.startswith(rung + "_")]
    if not rates:
        # No progress line within the calibration window (session 20's first GPU run: K4's start-up is longer, so it
        # fell back to MIN_STEPS = 800). Take the other rungs' slowest rate, scaled by 1.5 (K4's rows are 192 bytes
        # against K2's 128; measured in that run: 29.9 vs 25.0 ms per step, i.e. 1.2x).
        other = [v["s_per_step"] for k, v in per.items() if not k.startswith(rung + "_")]
        if not other:
            out["steps"][rung] = min(target, min_steps)
            out.setdefault("notes", []).append(f"{rung}: no calibration rate; {out['steps'][rung]} steps")
            continue
        rates = [1.5 * max(other)]
        out.setdefault("notes", []).append(f"{rung}: no calibration rate; 1.5x the other rungs' slowest")
    fit = int(0.9 * avail / max(rates) / 40) * 40
    out["steps"][rung] = max(min_steps, min(target, fit))
    out[rung + "_slowest_s_per_step"] = round(max(rates), 5)
    out[rung + "_fit_steps"] = fit
print(json.dumps(out, indent=1))
