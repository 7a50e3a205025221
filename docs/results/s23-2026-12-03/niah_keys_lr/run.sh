#!/usr/bin/env bash
# Session 23 ([niah] #21 item 4): session 22's one-call driver (docs/results/s22-2026-12-03/niah_keys/run.sh, whose
# header below describes the phases) on configs/niah/experiment-gpu-keys-lr1e-3.json: the keys experiment with learning
# rate 1e-3 → 1e-4 instead of 2e-3 → 2e-4 (the probe of call A: full attention alone left the plateau by step ~600
# at 1e-3 and stayed on it at 4e-3 and, in session 22, at 2e-3) and evaluation lengths up to 8k. Session 23 runs all
# four architectures side by side: ARCHS="full_attention standard_periodic reverse_periodic gdn", STEPS0/STEPS1 set
# by the call. Only the --base passed to make_config.py differs from session 22's script (BASE overrides it).
# (session 22's header) Session 22 ([niah] #21 item 4): configs/niah/experiment-gpu-keys.json (session 20: a 2-key single + multikey stage
# of 16/32-token haystacks, then all four tasks at 16-256; 10 languages in 7 scripts) for full_attention and
# standard_periodic, side by side on one H200, in ONE device call of <= 540 s. From the repo root:
#   HLM=/tmp/hlm/bin/hybridlm LD_LIBRARY_PATH=/tmp/hlm/lib OUT=$OUT bash docs/results/s22-2026-12-03/niah_keys/run.sh
# Needs data/corpus/demo (git-ignored, built by `make corpus-demo` with downloads the device machine cannot make):
# present, or CORPUS_TGZ (default out/niah_keys/corpus.tgz: `tar czf out/niah_keys/corpus.tgz -C data/corpus/demo
# --exclude=jsonl .`, ~2 MB) carried with the call and unpacked here; else exit 4 with a message.
# Phases (t = seconds since this script started; every process under `timeout`, so the call always returns):
#   1 config     make_config.py: the keys config at STEPS0 + STEPS1 steps per architecture (its header has the sizing)
#   2 train+eval one `hybridlm niah experiment --architectures A` process per architecture on one --out (the data
#                stage runs once, under the experiment's lock), cut at t = TRAIN_DEADLINE_S
#   3 rescue     per architecture, when its process was cut (the CLI cannot evaluate an unfinished run):
#                training finished -> the same command again continues the evaluation after its last cell;
#                training not finished -> `hybridlm niah` (run mode, the experiment's eval settings, same prompts) on
#                the newest checkpoint (stage 2's, else stage 1's model or checkpoint); both cut at t = EVAL_DEADLINE_S
#   4 reports    --report-only (the experiment's report.md and CSVs over the finished architectures), summarize.py:
#                $OUT/results.csv (per arch, language, task, length) and $OUT/results.md (Table 2 layout per
#                architecture, the deficit, number tasks only, per task, training)
#   5 files      $OUT: driver.log, results.csv, results.md, report.md, smi.csv, niah_keys.tgz (configs, logs,
#                metrics, test CE, eval CSVs and items, the experiment's reports; no data, checkpoints or weights)
# Variables (defaults): HLM (required), OUT (out/niah_keys_out), WORK (/tmp/niah_keys_work; kept, so a second call on a
# warm machine resumes; FRESH=1 empties it), DEVICE (cuda), PRECISION (bf16 on cuda, fp32 on cpu), STEPS0 (3584),
# STEPS1 (896), CKPT (256), ARCHS (full_attention standard_periodic), BUDGET_S (525), TRAIN_DEADLINE_S (430),
# EVAL_DEADLINE_S (BUDGET_S - 20), CORPUS_TGZ; CPU check only: TINY=1 with ROWS, LANGS, EVAL_LENGTHS, EVAL_N.
set -u
HERE=docs/results/s22-2026-12-03/niah_keys  # its make_config.py and summarize.py
T0S=$(date +%s)
el() { echo $(( $(date +%s) - T0S )); }
say() { echo "[$(el) s] $*"; }
HLM=${HLM:?set HLM to a hybridlm binary}
OUT=${OUT:-out/niah_keys_out}; WORK=${WORK:-/tmp/niah_keys_work}
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then PRECISION=${PRECISION:-fp32}; else PRECISION=${PRECISION:-bf16}; fi
STEPS0=${STEPS0:-3584}; STEPS1=${STEPS1:-896}; CKPT=${CKPT:-256}
ARCHS=${ARCHS:-full_attention standard_periodic}
BUDGET_S=${BUDGET_S:-525}; TRAIN_DEADLINE_S=${TRAIN_DEADLINE_S:-430}; EVAL_DEADLINE_S=${EVAL_DEADLINE_S:-$(( BUDGET_S - 20 ))}
CORPUS_TGZ=${CORPUS_TGZ:-out/niah_keys/corpus.tgz}
mkdir -p "$OUT"
exec > >(tee "$OUT/driver.log") 2>&1
say "start: HLM=$HLM DEVICE=$DEVICE PRECISION=$PRECISION STEPS0=$STEPS0 STEPS1=$STEPS1 ARCHS='$ARCHS' BUDGET_S=$BUDGET_S TRAIN_DEADLINE_S=$TRAIN_DEADLINE_S EVAL_DEADLINE_S=$EVAL_DEADLINE_S $(nproc) cores; git $(git rev-parse --short HEAD 2>/dev/null)"
"$HLM" --help > /dev/null 2>&1 || { say "FAILED: $HLM does not run (LD_LIBRARY_PATH?)"; exit 3; }
if [ ! -f data/corpus/demo/corpus.json ]; then
  if [ -f "$CORPUS_TGZ" ]; then
    mkdir -p data/corpus/demo && tar xzf "$CORPUS_TGZ" -C data/corpus/demo || { say "FAILED: unpacking $CORPUS_TGZ"; exit 4; }
    say "corpus: unpacked $CORPUS_TGZ into data/corpus/demo"
  else
    say "FAILED: no data/corpus/demo/corpus.json and no $CORPUS_TGZ (build it with 'make corpus-demo' and carry" \
        "'tar czf $CORPUS_TGZ -C data/corpus/demo --exclude=jsonl .')"; exit 4
  fi
fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
[ "${FRESH:-0}" = 1 ] && rm -rf "$WORK"
EXP=$WORK/exp; LOGS=$WORK/logs
mkdir -p "$EXP" "$LOGS" "$WORK/status"; rm -f "$WORK"/status/*  # this call's outcomes only

# --- 1. config
TINY_ARGS=()
[ "${TINY:-0}" = 1 ] && TINY_ARGS=(--tiny --rows "${ROWS:-2}" --langs "${LANGS:-eng_Latn,rus_Cyrl}" \
  --eval-lengths "${EVAL_LENGTHS:-64}" --eval-n "${EVAL_N:-2}")
CFG=$WORK/config_given.json
python3 $HERE/make_config.py "$CFG" --base "${BASE:-configs/niah/experiment-gpu-keys-lr1e-3.json}" --steps0 "$STEPS0" --steps1 "$STEPS1" --checkpoint-every "$CKPT" \
  --device "$DEVICE" --precision "$PRECISION" --archs "$(echo $ARCHS | tr ' ' ',')" ${TINY_ARGS[@]+"${TINY_ARGS[@]}"} || { say "FAILED: config"; exit 5; }
# The run mode's settings of the experiment's evaluation (for a checkpoint's evaluation in phase 3).
read -r E_LANGS E_TASKS E_LENGTHS E_N E_SEED E_MNT E_BATCH E_SPLIT E_CHUNK E_HELD E_CORPUS < <(python3 -c "
import json; c = json.load(open('$CFG')); e = c['eval']
print(','.join(c['langs']), ','.join(e['tasks']), ','.join(str(x) for x in e['lengths']), e['n'], e['seed'],
      e['max_new_tokens'], e['max_batch'], e['split'], e['prefill_chunk'], c['held_out_docs'], c['corpus'])")

# GPU utilisation every 5 s (seconds since the start, %, MiB)
SMI=""
if command -v nvidia-smi > /dev/null; then
  ( while :; do echo "$(el),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | head -1)"
      for _ in 1 2 3 4 5; do sleep 1; done; done ) > "$OUT/smi.csv" 2>&1 &  # 1-s sleeps: none outlives the kill
  SMI=$!
fi

limit_to() { local l=$(( $1 - $(el) )); [ $l -lt 5 ] && l=5; echo $l; }
experiment() {  # arch deadline logname: one `niah experiment` process for one architecture, cut at the deadline
  timeout -k 5 "$(limit_to $2)" "$HLM" niah experiment --config "$CFG" --out "$EXP" --device "$DEVICE" \
    --architectures "$1" >> "$LOGS/$1.out" 2>> "$LOGS/$3.log"
}
# The newest model of an unfinished run: stage 2's newest checkpoint, else stage 1's model, else its checkpoint.
newest_model() {
  local r=$EXP/runs/$1 c
  c=$(ls -d "$r"/stage-1/checkpoint-* 2>/dev/null | sort | tail -1)
  [ -n "$c" ] && { echo "$c"; return; }
  [ -f "$r/stage-0/model/config.json" ] && { echo "$r/stage-0/model"; return; }
  ls -d "$r"/stage-0/checkpoint-* 2>/dev/null | sort | tail -1
}
arch_job() {  # arch: phases 2 and 3 for one architecture; the outcome goes to $WORK/status/<arch>
  local a=$1 s rc m
  s=$(date +%s); experiment "$a" "$TRAIN_DEADLINE_S" "$a"; rc=$?
  say "$a: experiment rc $rc after $(( $(date +%s) - s )) s"
  if [ $rc -eq 0 ]; then echo "final model; evaluation complete" > "$WORK/status/$a"; return; fi
  if [ $rc -ne 124 ] && [ $rc -ne 137 ]; then  # an error, not the deadline (e.g. another config in a kept WORK: FRESH=1)
    say "$a: FAILED: $(grep -iE 'error|what' "$LOGS/$a.log" | tail -2 | cut -c1-400)"
    echo "experiment failed (rc $rc): see logs/$a.log" > "$WORK/status/$a"; return
  fi
  if [ -f "$EXP/runs/$a/stage-1/test.json" ] && [ -f "$EXP/runs/$a/stage-1/model/config.json" ]; then
    say "$a: training finished, evaluation cut: continuing it until t = $EVAL_DEADLINE_S s"
    experiment "$a" "$EVAL_DEADLINE_S" "$a.continue"; rc=$?
    say "$a: continuation rc $rc"
    [ $rc -eq 0 ] && echo "final model; evaluation complete (continued after a cut)" > "$WORK/status/$a" \
                  || echo "final model; evaluation cut (rc $rc): partial" > "$WORK/status/$a"
    return
  fi
  m=$(newest_model "$a")
  if [ -z "$m" ]; then say "$a: training cut before its first checkpoint: nothing to evaluate"
    echo "training cut (rc $rc) before any checkpoint: not evaluated" > "$WORK/status/$a"; return; fi
  say "$a: training cut (rc $rc): evaluating $m with the run mode until t = $EVAL_DEADLINE_S s"
  rm -rf "$WORK/fallback/$a"
  timeout -k 5 "$(limit_to $EVAL_DEADLINE_S)" "$HLM" niah --model "$m" --tokenizer bytes --langs "$E_LANGS" \
    --tasks "$E_TASKS" --lengths "$E_LENGTHS" --n "$E_N" --seed "$E_SEED" --max-new-tokens "$E_MNT" --stop '</Answer>' \
    --max-batch "$E_BATCH" --split "$E_SPLIT" --prefill-chunk "$E_CHUNK" --held-out-docs "$E_HELD" --corpus "$E_CORPUS" \
    --device "$DEVICE" $( [ "$DEVICE" = cpu ] || echo --precision "$PRECISION" ) --out "$WORK/fallback/$a" \
    > "$LOGS/$a.fallback.out" 2> "$LOGS/$a.fallback.log"; rc=$?
  say "$a: checkpoint evaluation rc $rc"
  echo "training cut: ${m#$EXP/runs/} evaluated with the run mode$( [ $rc -eq 0 ] || echo " (cut, rc $rc: partial)")" > "$WORK/status/$a"
}
progress() {  # a line every 30 s: each architecture's newest trainer or evaluation line
  while :; do
    for _ in $(seq 30); do sleep 1; done  # 1-s sleeps: none outlives the kill (it would hold driver.log's tee open)
    local line=""
    for a in $ARCHS; do
      line+="  $a: $(grep -hE '^step [0-9]+/|niah experiment: (eval|training)' "$LOGS/$a".*log 2>/dev/null | tail -1 | cut -c1-110)"
    done
    say "progress:$line"
  done
}

# --- 2 + 3. one job per architecture, side by side
pids=()
for a in $ARCHS; do arch_job "$a" & pids+=($!); done
progress & PROG=$!
for p in "${pids[@]}"; do wait "$p"; done
kill $PROG 2>/dev/null; wait $PROG 2>/dev/null
[ -n "$SMI" ] && { kill $SMI 2>/dev/null; wait $SMI 2>/dev/null; }

# --- 4. reports
timeout -k 5 "$(limit_to $(( BUDGET_S - 8 )))" "$HLM" niah experiment --config "$CFG" --out "$EXP" --report-only \
  > "$LOGS/report.out" 2> "$LOGS/report.log"; rc=$?; say "report-only rc $rc"
[ $rc -eq 0 ] && [ -f "$EXP/report.md" ] && cp "$EXP/report.md" "$OUT/report.md"
python3 $HERE/summarize.py "$WORK" "$OUT" "$ARCHS" || say "summarize.py failed"
[ -f "$OUT/results.md" ] && sed -n '1,60p' "$OUT/results.md"

# --- 5. the rest, small: no training data, checkpoints or weights
( cd "$WORK" && tar czf "$OUT/niah_keys.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' --exclude='checkpoint-*' \
    --exclude='exp/data' config_given.json status logs exp $( [ -d fallback ] && echo fallback ) ) || say "tar failed"
ls -la "$OUT"
say "done"
exec 1>&- 2>&-; sleep 1  # tee sees the end of its input and writes the rest of driver.log
