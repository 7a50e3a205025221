#!/usr/bin/env python3
"""Session 20: filter of one training process's output (stdin) into a small log plus a JSON summary.

usage: ... 2>&1 | logfilter.py T0_EPOCH LOG_PATH
  LOG_PATH       every line that is not a progress line, and every 4th progress line ("step N/M ..."), each
                 prefixed with the seconds since T0_EPOCH (the driver's start)
  LOG_PATH.json  written at every 4th progress line and at the end: planned and last step, the CE of the last
                 progress line and the mean of the last 5, seconds per step between the first and the last
                 progress line (the rate under whatever else shares the GPU), start_s (this filter's start, i.e.
                 the process's launch) and end_s (now), and every progress line's (seconds, step) as "points"
                 (seconds since T0_EPOCH throughout)
"""
import json, re, sys, time

t0, path = float(sys.argv[1]), sys.argv[2]
step_re = re.compile(r"^step (\d+)/(\d+)\s+tokens \S+\s+ce ([0-9.eE+-]+|nan|inf)")
out = open(path, "w")
seen, ces, first, last, total, points = 0, [], None, None, 0, []
t_start = time.time() - t0


def summary(done):
    s = {"done": done, "planned_steps": total, "last_step": last[1] if last else 0,
         "last_ce": ces[-1] if ces else None, "final_ce_mean5": sum(ces[-5:]) / len(ces[-5:]) if ces else None,
         "start_s": round(t_start, 2), "end_s": round(time.time() - t0, 2), "points": points}
    if first and last and last[1] > first[1]:
        s["s_per_step"] = (last[0] - first[0]) / (last[1] - first[1])
        s["rate_steps"] = [first[1], last[1]]
    json.dump(s, open(path + ".json", "w"))


for line in sys.stdin:
    now = time.time() - t0
    m = step_re.match(line)
    if m:
        seen += 1
        step, total = int(m.group(1)), int(m.group(2))
        ces.append(float(m.group(3)))
        if first is None:
            first = (now, step)
        last = (now, step)
        points.append([round(now, 3), step])
        if seen % 4 == 0 or step == total:
            out.write(f"[{now:7.1f}] {line}")
        if seen % 4 == 0:
            summary(False)
    else:
        out.write(f"[{now:7.1f}] {line}")
    out.flush()
summary(True)
