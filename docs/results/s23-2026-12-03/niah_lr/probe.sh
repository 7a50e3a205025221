#!/usr/bin/env bash
# Session 23 ([niah] #21 item 4): does full attention leave the answer-loss plateau at another learning rate?
# Session 22's keys experiment (configs/niah/experiment-gpu-keys.json, 8 layers, hidden 256, lr 2e-3 → 2e-4 per stage)
# left full attention on the plateau for all 3,584 + 896 steps (train CE 0.52 → 0.37) while the standard periodic
# hybrid left it within 256 steps. This probe trains full attention only, stage 1 of that config unchanged (same
# 3,584-step schedule, so the learning-rate curve is the long run's) at each learning rate in LRS, one process per
# rate side by side on one GPU, each cut at SECONDS, and prints the train CE each logged at its last logged steps.
# From the repo root: HLM=/tmp/hlm/bin/hybridlm OUT=$OUT bash docs/results/s23-2026-12-03/niah_lr/probe.sh
# Needs data/corpus/demo or CORPUS_TGZ (default out/niah_keys/corpus.tgz) as session 22's run.sh.
# (As run in call A, the summary read a valid record's per-language "ce" object and stopped with a TypeError; the
# probe's figures in docs/results.md come from the progress lines of its logs. Fixed after the call, not re-run.)
# Variables (defaults): LRS ("5e-4 1e-3 4e-3"), SECONDS_EACH (150), WORK (/tmp/niah_lr_work), ARCH (full_attention).
set -u
HLM=${HLM:?set HLM}; OUT=${OUT:-out/niah_lr_out}; WORK=${WORK:-/tmp/niah_lr_work}
LRS=${LRS:-5e-4 1e-3 4e-3}; SECONDS_EACH=${SECONDS_EACH:-150}; ARCH=${ARCH:-full_attention}
CORPUS_TGZ=${CORPUS_TGZ:-out/niah_keys/corpus.tgz}
mkdir -p "$OUT" "$WORK"
if [ ! -f data/corpus/demo/corpus.json ]; then
  mkdir -p data/corpus/demo && tar xzf "$CORPUS_TGZ" -C data/corpus/demo || { echo "no corpus"; exit 4; }
fi
pids=()
for lr in $LRS; do
  cfg=$WORK/config_lr$lr.json
  python3 - "$cfg" "$lr" "$ARCH" <<'PY'
import json, sys
c = json.load(open("configs/niah/experiment-gpu-keys.json"))
c["architectures"] = [sys.argv[3]]
c["train"]["lr"] = float(sys.argv[2]); c["train"]["min_lr"] = float(sys.argv[2]) / 10
c["train"]["log_every_steps"] = 32
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
  timeout -k 5 "$SECONDS_EACH" "$HLM" niah experiment --config "$cfg" --out "$WORK/lr$lr" --device cuda \
    --architectures "$ARCH" > "$OUT/lr$lr.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for lr in $LRS; do
  m=$(find "$WORK/lr$lr" -name metrics.jsonl | head -1)
  echo "== lr $lr ($m)"
  [ -n "$m" ] && cp "$m" "$OUT/metrics_lr$lr.jsonl" && python3 - "$m" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
st = [(r["step"], r["loss"]) for r in rows if r.get("type") == "step" and r.get("loss") is not None]
va = [(r["step"], round(r["mean"]["ce"], 4)) for r in rows if r.get("type") == "valid"]  # "ce" is per language
# mean train loss over windows of 128 steps: the plateau is ~0.45-0.5, leaving it shows as a fall below ~0.1
win = {}
for s_, l in st: win.setdefault((s_ - 1) // 128, []).append(l)
print("steps", len(st), "| mean loss per 128 steps:", [round(sum(v) / len(v), 4) for _, v in sorted(win.items())])
print("valid:", va)
PY
done
