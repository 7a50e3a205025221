#!/usr/bin/env bash
# Session 26 ([niah] #21 item 4): several seeds per architecture of configs/niah/experiment-gpu-keys-lr1e-3.json (the
# keys experiment at lr 1e-3 -> 1e-4: a 2-key single + multikey stage of 16/32-token haystacks, then all four tasks at
# 16-256; 10 languages in 7 scripts), all runs side by side on one H200, in ONE device call of <= 590 s. Why seeds:
# session 23 found the onset of retrieval to be a sharp transition whose timing depends on the schedule and the seed
# more than on the architecture (docs/results.md), so the call reports, per architecture, how many seeds left the
# plateau, when, and the accuracy over seeds. Adapted from session 22's driver
# (docs/results/s22-2026-12-03/niah_keys/run.sh: the same phases, deadlines and rescue). From the repo root:
#   HLM=/tmp/hlm/bin/hybridlm LD_LIBRARY_PATH=/tmp/hlm/lib OUT=$OUT bash docs/results/s26-2026-12-04/niah_seeds/run.sh
# Needs data/corpus/demo (git-ignored, built by `make corpus-demo` with downloads the device machine cannot make):
# present, or CORPUS_TGZ (default out/niah_keys/corpus.tgz: `tar czf out/niah_keys/corpus.tgz -C data/corpus/demo
# --exclude=jsonl .`, ~2 MB) carried with the call and unpacked here; else exit 4 with a message.
# A run is one (architecture, seed); seed N trains in $WORK/exp-sN with $WORK/config-sN.json (train.init_seed and
# train.data_seed N, the examples the base's: make_config.py). Phases (t = seconds since this script started; every
# process under `timeout`, so the call always returns):
#   1 config     make_config.py once per seed: STEPS0 + STEPS1 steps per run (its header and README.md: the sizing)
#   2 train+eval one `hybridlm niah experiment --architectures A` process per run, all side by side on the one GPU
#                (each seed's data stage runs once, under its experiment's lock), cut at t = TRAIN_DEADLINE_S
#   3 rescue     per run, when its process was cut (the CLI cannot evaluate an unfinished run):
#                training finished -> the same command again continues the evaluation after its last cell;
#                training not finished -> `hybridlm niah` (run mode, the experiment's eval settings, same prompts) on
#                the newest checkpoint (stage 2's, else stage 1's model or checkpoint) into $WORK/fallback/<run>;
#                both cut at t = EVAL_DEADLINE_S
#   4 reports    --report-only per seed (the experiment's report.md and CSVs over its finished architectures, into the
#                tarball), summarize.py: $OUT/results.csv (per run, language, task, length), $OUT/runs.csv (per run:
#                training, onset step of retrieval) and $OUT/results.md (over seeds: onsets, accuracy mean and range,
#                the deficit, per task)
#   5 files      $OUT: driver.log, results.csv, results.md, runs.csv, smi.csv, niah_seeds.tgz (configs, status, logs,
#                metrics, test CE, eval CSVs and items, the experiments' reports; no data, checkpoints or weights);
#                the device returns at most 8 files
# Variables (defaults): HLM (required), OUT (out/niah_seeds_out), WORK (/tmp/niah_seeds_work; kept, so a second call
# on a warm machine resumes; FRESH=1 empties it), DEVICE (cuda), PRECISION (bf16 on cuda, fp32 on cpu), STEPS0 (1024),
# STEPS1 (256), CKPT (128), SEEDS (1 2 3), ARCHS (full_attention standard_periodic reverse_periodic; full_attention
# first), EVAL_LENGTHS (64,256,1k,4k), MPS (auto), BUDGET_S (560), TRAIN_DEADLINE_S (410), EVAL_DEADLINE_S (BUDGET_S - 25),
# CORPUS_TGZ; CPU check only: TINY=1 with ROWS (2), LANGS (eng_Latn,rus_Cyrl), EVAL_N (2), EVAL_LENGTHS then 64.
set -u
HERE=docs/results/s26-2026-12-04/niah_seeds
T0S=$(date +%s)
el() { echo $(( $(date +%s) - T0S )); }
say() { echo "[$(el) s] $*"; }
HLM=${HLM:?set HLM to a hybridlm binary}
OUT=${OUT:-out/niah_seeds_out}; WORK=${WORK:-/tmp/niah_seeds_work}
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then PRECISION=${PRECISION:-fp32}; else PRECISION=${PRECISION:-bf16}; fi
STEPS0=${STEPS0:-1024}; STEPS1=${STEPS1:-256}; CKPT=${CKPT:-128}
SEEDS=${SEEDS:-1 2 3}
ARCHS=${ARCHS:-full_attention standard_periodic reverse_periodic}
if [ "${TINY:-0}" = 1 ]; then EVAL_LENGTHS=${EVAL_LENGTHS:-64}; else EVAL_LENGTHS=${EVAL_LENGTHS:-64,256,1k,4k}; fi
BUDGET_S=${BUDGET_S:-560}; TRAIN_DEADLINE_S=${TRAIN_DEADLINE_S:-410}; EVAL_DEADLINE_S=${EVAL_DEADLINE_S:-$(( BUDGET_S - 25 ))}
CORPUS_TGZ=${CORPUS_TGZ:-out/niah_keys/corpus.tgz}
mkdir -p "$OUT"
exec > >(tee "$OUT/driver.log") 2>&1
say "start: HLM=$HLM DEVICE=$DEVICE PRECISION=$PRECISION STEPS0=$STEPS0 STEPS1=$STEPS1 CKPT=$CKPT SEEDS='$SEEDS' ARCHS='$ARCHS' EVAL_LENGTHS=$EVAL_LENGTHS BUDGET_S=$BUDGET_S TRAIN_DEADLINE_S=$TRAIN_DEADLINE_S EVAL_DEADLINE_S=$EVAL_DEADLINE_S $(nproc) cores; git $(git rev-parse --short HEAD 2>/dev/null)"
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
# MPS (auto | off): under the CUDA MPS control daemon the runs' small kernels run on the GPU at the same time instead of
# taking turns by time slice (sessions 22-23: two to four processes together trained at ~0.9-1.1M tokens/s, full
# attention alone at ~0.72M). auto: used when nvidia-cuda-mps-control exists and a CUDA client connects through it
# (a torch probe); otherwise, or when the probe fails, the plain GPU. The daemon is stopped after the runs.
MPS_ON=0
if [ "$DEVICE" = cuda ] && [ "${MPS:-auto}" != off ] && command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d && timeout 90 env -u LD_LIBRARY_PATH python3 -c "import torch; print(torch.ones(4, device='cuda').sum().item())"; then
    MPS_ON=1; say "MPS: daemon up, a client connected: the runs share the GPU through it"
  else
    echo quit | nvidia-cuda-mps-control 2> /dev/null; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    say "MPS: the daemon or its probe failed: the plain GPU"
  fi
else
  say "MPS: not used ($(command -v nvidia-cuda-mps-control > /dev/null && echo "MPS=${MPS:-auto}" || echo "no nvidia-cuda-mps-control"))"
fi
[ "${FRESH:-0}" = 1 ] && rm -rf "$WORK"
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/status"; rm -f "$WORK"/status/*  # this call's outcomes only

# --- 1. config, one per seed
TINY_ARGS=()
[ "${TINY:-0}" = 1 ] && TINY_ARGS=(--tiny --rows "${ROWS:-2}" --langs "${LANGS:-eng_Latn,rus_Cyrl}" --eval-n "${EVAL_N:-2}")
for s in $SEEDS; do
  python3 $HERE/make_config.py "$WORK/config-s$s.json" --seed "$s" --steps0 "$STEPS0" --steps1 "$STEPS1" \
    --checkpoint-every "$CKPT" --device "$DEVICE" --precision "$PRECISION" --archs "$(echo $ARCHS | tr ' ' ',')" \
    --eval-lengths "$EVAL_LENGTHS" ${TINY_ARGS[@]+"${TINY_ARGS[@]}"} || { say "FAILED: config of seed $s"; exit 5; }
done
# The run mode's settings of the experiments' evaluation (for a checkpoint's evaluation in phase 3); the seeds'
# configs differ only in train.init_seed and train.data_seed.
FIRST_SEED=${SEEDS%% *}
read -r E_LANGS E_TASKS E_LENGTHS E_N E_SEED E_MNT E_BATCH E_SPLIT E_CHUNK E_HELD E_CORPUS E_CELLS < <(python3 -c "
import json; c = json.load(open('$WORK/config-s$FIRST_SEED.json')); e = c['eval']
print(','.join(c['langs']), ','.join(e['tasks']), ','.join(str(x) for x in e['lengths']), e['n'], e['seed'],
      e['max_new_tokens'], e['max_batch'], e['split'], e['prefill_chunk'], c['held_out_docs'], c['corpus'],
      len(c['langs']) * len(e['tasks']) * len(e['lengths']))")

# GPU utilisation every 5 s (seconds since the start, %, MiB)
SMI=""
if command -v nvidia-smi > /dev/null; then
  ( while :; do echo "$(el),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | head -1)"
      for _ in 1 2 3 4 5; do sleep 1; done; done ) > "$OUT/smi.csv" 2>&1 &  # 1-s sleeps: none outlives the kill
  SMI=$!
fi

limit_to() { local l=$(( $1 - $(el) )); [ $l -lt 5 ] && l=5; echo $l; }
experiment() {  # arch seed deadline logname: one `niah experiment` process for one run, cut at the deadline
  timeout -k 5 "$(limit_to $3)" "$HLM" niah experiment --config "$WORK/config-s$2.json" --out "$WORK/exp-s$2" \
    --device "$DEVICE" --architectures "$1" >> "$LOGS/$1-s$2.out" 2>> "$LOGS/$4.log"
}
# The newest model of an unfinished run: stage 2's newest checkpoint, else stage 1's model, else its checkpoint.
newest_model() {  # arch seed
  local r=$WORK/exp-s$2/runs/$1 c
  c=$(ls -d "$r"/stage-1/checkpoint-* 2>/dev/null | sort | tail -1)
  [ -n "$c" ] && { echo "$c"; return; }
  [ -f "$r/stage-0/model/config.json" ] && { echo "$r/stage-0/model"; return; }
  ls -d "$r"/stage-0/checkpoint-* 2>/dev/null | sort | tail -1
}
run_job() {  # arch seed: phases 2 and 3 for one run; the outcome goes to $WORK/status/<arch>-s<seed>
  local a=$1 s=$2 r=$1-s$2 t rc m
  t=$(date +%s); experiment "$a" "$s" "$TRAIN_DEADLINE_S" "$r"; rc=$?
  say "$r: experiment rc $rc after $(( $(date +%s) - t )) s"
  if [ $rc -eq 0 ]; then echo "final model; evaluation complete" > "$WORK/status/$r"; return; fi
  if [ $rc -ne 124 ] && [ $rc -ne 137 ]; then  # an error, not the deadline (e.g. another config in a kept WORK: FRESH=1)
    say "$r: FAILED: $(grep -iE 'error|what' "$LOGS/$r.log" | tail -2 | cut -c1-400)"
    echo "experiment failed (rc $rc): see logs/$r.log" > "$WORK/status/$r"; return
  fi
  if [ -f "$WORK/exp-s$s/runs/$a/stage-1/test.json" ] && [ -f "$WORK/exp-s$s/runs/$a/stage-1/model/config.json" ]; then
    say "$r: training finished, evaluation cut: continuing it until t = $EVAL_DEADLINE_S s"
    experiment "$a" "$s" "$EVAL_DEADLINE_S" "$r.continue"; rc=$?
    say "$r: continuation rc $rc"
    [ $rc -eq 0 ] && echo "final model; evaluation complete (continued after a cut)" > "$WORK/status/$r" \
                  || echo "final model; evaluation cut (rc $rc): partial" > "$WORK/status/$r"
    return
  fi
  m=$(newest_model "$a" "$s")
  if [ -z "$m" ]; then say "$r: training cut before its first checkpoint: nothing to evaluate"
    echo "training cut (rc $rc) before any checkpoint: not evaluated" > "$WORK/status/$r"; return; fi
  say "$r: training cut (rc $rc): evaluating ${m#$WORK/} with the run mode until t = $EVAL_DEADLINE_S s"
  rm -rf "$WORK/fallback/$r"
  timeout -k 5 "$(limit_to $EVAL_DEADLINE_S)" "$HLM" niah --model "$m" --tokenizer bytes --langs "$E_LANGS" \
    --tasks "$E_TASKS" --lengths "$E_LENGTHS" --n "$E_N" --seed "$E_SEED" --max-new-tokens "$E_MNT" --stop '</Answer>' \
    --max-batch "$E_BATCH" --split "$E_SPLIT" --prefill-chunk "$E_CHUNK" --held-out-docs "$E_HELD" --corpus "$E_CORPUS" \
    --device "$DEVICE" $( [ "$DEVICE" = cpu ] || echo --precision "$PRECISION" ) --out "$WORK/fallback/$r" \
    > "$LOGS/$r.fallback.out" 2> "$LOGS/$r.fallback.log"; rc=$?
  say "$r: checkpoint evaluation rc $rc"
  m="training cut: ${m#$WORK/exp-s$s/runs/} evaluated with the run mode"
  [ $rc -eq 0 ] && echo "$m" > "$WORK/status/$r" || echo "$m (cut, rc $rc: partial)" > "$WORK/status/$r"
}
# A run's state from its newest log, short: "448/1024 0.50" (step/planned of its stage, train CE), "eval 39/160" (the
# experiment's evaluation, cells done), "ckpt 12/160" (a checkpoint's evaluation, cells done), "-" (nothing yet).
short_state() {  # run
  local f l
  f=$(ls -t "$LOGS/$1".*log 2>/dev/null | head -1)
  case "$f" in
    *fallback*) echo "ckpt $(grep -cE '^niah: [^ ]+ [^ ]+ [^ ]+ [0-9]+: ' "$f")/$E_CELLS"; return ;;
  esac
  l=$( [ -n "$f" ] && grep -hE '^step [0-9]+/|niah experiment: eval [^ ]+ [0-9]+/' "$f" | tail -1)
  case "$l" in
    step*) echo "$l" | awk '{printf "%s %.2f", $2, $6}' ;;
    niah*) echo "$l" | awk '{print "eval", $5}' ;;
    *) echo "-" ;;
  esac
}
initials() { echo "$1" | awk -F_ '{for (i = 1; i <= NF; i++) printf "%s", (NF > 1 ? substr($i, 1, 1) : $i)}'; }
progress() {  # a line every 30 s: per run (arch initials + seed: fa1, sp1, rp1, gdn1) its short_state
  while :; do
    for _ in $(seq 30); do sleep 1; done  # 1-s sleeps: none outlives the kill (it would hold driver.log's tee open)
    local line="" a s
    for s in $SEEDS; do for a in $ARCHS; do
      line+=" $(initials "$a")$s $(short_state "$a-s$s") |"
    done; done
    say "progress:${line% |}"
  done
}

# --- 2 + 3. one job per run, side by side
pids=()
for s in $SEEDS; do for a in $ARCHS; do run_job "$a" "$s" & pids+=($!); done; done
progress & PROG=$!
for p in "${pids[@]}"; do wait "$p"; done
kill $PROG 2>/dev/null; wait $PROG 2>/dev/null
[ -n "$SMI" ] && { kill $SMI 2>/dev/null; wait $SMI 2>/dev/null; }
[ $MPS_ON = 1 ] && { echo quit | nvidia-cuda-mps-control; say "MPS: daemon stopped"; }

# --- 4. reports
for s in $SEEDS; do
  [ -f "$WORK/exp-s$s/config.json" ] || { say "seed $s: no experiment folder, no report"; continue; }
  timeout -k 5 "$(limit_to $(( BUDGET_S - 10 )))" "$HLM" niah experiment --config "$WORK/config-s$s.json" \
    --out "$WORK/exp-s$s" --report-only > "$LOGS/report-s$s.out" 2> "$LOGS/report-s$s.log"
  say "seed $s: report-only rc $?"
done
python3 $HERE/summarize.py "$WORK" "$OUT" "$ARCHS" "$SEEDS" || say "summarize.py failed"
[ -f "$OUT/results.md" ] && sed -n '1,45p' "$OUT/results.md"

# --- 5. the rest, small: no training data, checkpoints or weights
( cd "$WORK" && tar czf "$OUT/niah_seeds.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' \
    --exclude='checkpoint-*' --exclude='exp-s*/data' config-s*.json status logs $(ls -d exp-s* fallback 2>/dev/null) ) \
  || say "tar failed"
ls -la "$OUT"
say "done"
exec 1>&- 2>&-; sleep 1  # tee sees the end of its input and writes the rest of driver.log
