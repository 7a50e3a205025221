#!/usr/bin/env bash
# Session 20 (issue #21 [niah] item 4): the CPU key-matching ladder of sessions 17-19 (docs/results/s19-2026-12-03/
# niah_keys) scaled up on one H200 in ONE device call of ~300 s. From the repo root:
#   HLM=/tmp/hlm/bin/hybridlm LD_LIBRARY_PATH=/tmp/hlm/lib bash docs/results/s20-2026-12-03/niah_gpu/run.sh
# Phases (all processes at once on one GPU; each process is one architecture of one `hybridlm niah experiment`):
#   1 data         easy_data.py examples (session 17's make_easy.py, in parallel, no zstd program) for K2 and K4
#   2 calibration  every main run at once for CAL_S seconds; sizing.py turns the measured seconds per step (all
#                  training at once) and start-up into the main runs' steps (skipped when K2_STEPS and K4_STEPS
#                  are given)
#   3 main         K2: 2 needles of 20 keys (K2long's data), K2_ARCHS x SEEDS; K4: 4 needles (K4long's data),
#                  K4_ARCHS, seed 0; 2 layers, hidden 64, 32 rows, lr 3e-3 -> 3e-4, answer loss, fp32; every
#                  process under `timeout` to the deadline BUDGET_S - EVAL_RESERVE_S (a run cut there is evaluated
#                  at its newest checkpoint; one every steps/8)
#   4 evaluation   eval_easy.py (session 17's method: EVAL_N fresh prompts, greedy, exact and digit agreement)
#   5 summary      $OUT/results.{csv,md}, $OUT/logs.tgz (configs, filtered logs, metrics, test.json, evaluations),
#                  $OUT/models.tgz (KEEP_MODELS=1), $OUT/driver.log
# A seed sets train.init_seed and train.data_seed (weights, training-document order); the examples are the same.
# Variables (defaults): HLM (required), OUT ($OUT, else out/niah_gpu), WORK (/tmp/niah_gpu_work, emptied),
# DEVICE (cuda), EVAL_DEVICE (cpu), BUDGET_S (300), EVAL_RESERVE_S (25), SEEDS (0 1 2), K2_ARCHS, K4_ARCHS (empty: none),
# K2_TARGET (19200 = 4x K2long), K4_TARGET (38400 = 8x K4long), K2_STEPS / K4_STEPS (fixed, no calibration),
# CAL_S (20), MIN_STEPS (800), EVAL_N (64), WORKERS (nproc), KEEP_MODELS (1).
set -u
HERE=docs/results/s20-2026-12-03/niah_gpu
T0S=$(date +%s)
el() { echo $(( $(date +%s) - T0S )); }
say() { echo "[$(el) s] $*"; }
HLM=${HLM:?set HLM to a hybridlm binary}
OUT=${OUT:-out/niah_gpu}; WORK=${WORK:-/tmp/niah_gpu_work}
DEVICE=${DEVICE:-cuda}; EVAL_DEVICE=${EVAL_DEVICE:-cpu}
BUDGET_S=${BUDGET_S:-300}; EVAL_RESERVE_S=${EVAL_RESERVE_S:-25}
SEEDS=${SEEDS:-0 1 2}
K2_ARCHS=${K2_ARCHS-full_attention standard_periodic reverse_periodic gdn}
K4_ARCHS=${K4_ARCHS-full_attention standard_periodic}
K2_TARGET=${K2_TARGET:-19200}; K4_TARGET=${K4_TARGET:-38400}
K2_STEPS=${K2_STEPS:-}; K4_STEPS=${K4_STEPS:-}
CAL_S=${CAL_S:-20}; MIN_STEPS=${MIN_STEPS:-800}; EVAL_N=${EVAL_N:-64}
WORKERS=${WORKERS:-$(nproc)}; KEEP_MODELS=${KEEP_MODELS:-1}
HELD_OUT=64; ROWS=32
mkdir -p "$OUT"; rm -rf "$WORK"; mkdir -p "$WORK/runs" "$WORK/cal"
exec > >(tee "$OUT/driver.log") 2>&1
DEADLINE=$(( BUDGET_S - EVAL_RESERVE_S ))
say "start: HLM=$HLM DEVICE=$DEVICE EVAL_DEVICE=$EVAL_DEVICE BUDGET_S=$BUDGET_S SEEDS='$SEEDS' K2_ARCHS='$K2_ARCHS' K4_ARCHS='$K4_ARCHS' $(nproc) cores; git $(git rev-parse --short HEAD 2>/dev/null)"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader

# Rung definitions: seq_len, training data args (K2long / K4long), evaluation args (eval_easy.py of session 19).
declare -A SEQ=([K2]=128 [K4]=192)
declare -A DATA_ARGS=([K2]="--digits 7 --digits-min 2 --hay 16 --needles 2" [K4]="--digits 7 --digits-min 2 --hay 16 --needles 4")
declare -A EVAL_ARGS=([K2]="--digits 7 --hay 16 --needles 2" [K4]="--digits 7 --hay 16 --needles 4")
declare -A ARCHS=([K2]="$K2_ARCHS" [K4]="$K4_ARCHS")
declare -A RSEEDS=([K2]="$SEEDS" [K4]="0")
RUNGS="K2 K4"; [ -z "$K4_ARCHS" ] && RUNGS="K2"; [ -z "$K2_ARCHS" ] && RUNGS="K4"

# --- 1. data: one corpus per rung at the largest step count the run may use, plus the haystack corpus.
declare -A MAXS=([K2]=${K2_STEPS:-$K2_TARGET} [K4]=${K4_STEPS:-$K4_TARGET})
python3 $HERE/easy_data.py "$WORK/hay" --hay-corpus --docs 32 > /dev/null || { say "haystack corpus failed"; exit 3; }
# Workers: K4's corpus takes ~3x K2's time (1.5x longer examples, 2x as many), so it gets 3/4 of them.
declare -A DW=([K2]=$(( WORKERS / 4 > 1 ? WORKERS / 4 : 1 )) [K4]=$(( WORKERS - WORKERS / 4 > 1 ? WORKERS - WORKERS / 4 : 1 )))
[ "$RUNGS" != "K2 K4" ] && DW=([K2]=$WORKERS [K4]=$WORKERS)
pids=()
for r in $RUNGS; do
  docs=$(( (105 * ${MAXS[$r]} * ROWS + 99) / 100 + 8 + 2 * HELD_OUT ))
  ( python3 $HERE/easy_data.py "$WORK/data/$r" --seq-len ${SEQ[$r]} --docs $docs --workers ${DW[$r]} \
      ${DATA_ARGS[$r]} | cut -c1-220
    echo '{"documents": '$docs', "examples": '$docs', "exact": '$docs', "tokens": '$((docs * ${SEQ[$r]}))', "seq_len": '${SEQ[$r]}', "note": "session 20 easy data (easy_data.py = make_easy.py examples)"}' \
      > "$WORK/data/$r/niah_train_data.json" ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p || { say "data generation failed"; exit 3; }; done
say "data written: $(du -sh "$WORK/data" | cut -f1)"

# One experiment folder: config (make_config.py), data/ -> the rung's corpus.
make_exp() {  # dir rung seed steps log_every archs(comma) [checkpoint_every]
  mkdir -p "$1" && ln -sfn "$WORK/data/$2" "$1/data"
  python3 $HERE/make_config.py "$1/config_given.json" --seq ${SEQ[$2]} --rows $ROWS --steps $4 --lr 3e-3 \
    --archs "$6" --seed $3 --corpus "$WORK/hay" --log-every $5 --held-out $HELD_OUT --checkpoint-every ${7:-0}
}
# One training process in the background: its filtered log, "rc wall_s" in <rundir>/rc. Sets LAST_PID.
launch() {  # rundir expdir arch limit_s
  mkdir -p "$1"
  ( s=$(date +%s)
    OMP_NUM_THREADS=1 timeout -k 5 "$4" "$HLM" niah experiment --config "$2/config_given.json" --out "$2" \
      --device "$DEVICE" --architectures "$3" 2>&1 | python3 $HERE/logfilter.py $T0S "$1/train.log"
    echo "${PIPESTATUS[0]} $(( $(date +%s) - s ))" > "$1/rc" ) &
  LAST_PID=$!
}
archs_csv() { echo "full_attention $1" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | paste -sd,; }
progress() {  # pids...: a line every 15 s while any runs, with each run's last logged step
  while :; do
    local alive=0; for p in "$@"; do kill -0 $p 2>/dev/null && alive=$((alive + 1)); done
    [ $alive -eq 0 ] && break
    local st=""
    for j in "$WORK"/"$PHASE"/*/train.log.json; do
      [ -f "$j" ] && st+=" $(basename $(dirname $j)):$(python3 -c "import json;s=json.load(open('$j'));print(f\"{s['last_step']}/{s['planned_steps']}\")" 2>/dev/null)"
    done
    say "$PHASE: $alive running;$st"
    sleep 15
  done
}

# --- 2. calibration: every main process at once for CAL_S seconds (then `timeout` ends them), on the main data.
if [ -z "$K2_STEPS" ] || [ -z "$K4_STEPS" ]; then
  PHASE=cal; pids=()
  for r in $RUNGS; do for s in ${RSEEDS[$r]}; do
    make_exp "$WORK/calexp/${r}_s$s" $r $s ${MAXS[$r]} 10 "$(archs_csv "${ARCHS[$r]}")"
    for a in ${ARCHS[$r]}; do launch "$WORK/cal/${r}_${a}_s$s" "$WORK/calexp/${r}_s$s" $a $CAL_S; pids+=($LAST_PID); done
  done; done
  say "calibration: ${#pids[@]} processes for $CAL_S s"
  progress "${pids[@]}" &
  PROG=$!
  for p in "${pids[@]}"; do wait $p; done
  kill $PROG 2>/dev/null; wait $PROG 2>/dev/null
  python3 $HERE/sizing.py "$WORK" $(el) $BUDGET_S $EVAL_RESERVE_S $K2_TARGET $K4_TARGET $MIN_STEPS > "$WORK/sizing.json"
  python3 -c "import json;s=json.load(open('$WORK/sizing.json'));print({k:v for k,v in s.items() if k!='calibration'});[print(' ',k,v) for k,v in s['calibration'].items()]"
  read -r S2 S4 < <(python3 -c "import json;s=json.load(open('$WORK/sizing.json'))['steps'];print(s.get('K2',0),s.get('K4',0))")
  K2_STEPS=${K2_STEPS:-$S2}; K4_STEPS=${K4_STEPS:-$S4}
fi
declare -A STEPS=([K2]=$K2_STEPS [K4]=$K4_STEPS)
say "main: K2 $K2_STEPS steps ($((K2_STEPS * ROWS)) examples), K4 $K4_STEPS steps ($((K4_STEPS * ROWS)) examples)"

# --- 3. main runs, all at once, each cut at the deadline.
PHASE=runs; pids=(); : > "$WORK/manifest.tsv"
limit=$(( DEADLINE - $(el) )); [ $limit -lt 10 ] && limit=10
for r in $RUNGS; do for s in ${RSEEDS[$r]}; do
  st=${STEPS[$r]}; le=$(( st >= 4800 ? 40 : st / 120 )); [ $le -lt 1 ] && le=1
  ck=$(( st / 8 > 1 ? st / 8 : 1 ))  # a run cut at the deadline is evaluated at its newest checkpoint
  make_exp "$WORK/exp/${r}_s$s" $r $s $st $le "$(archs_csv "${ARCHS[$r]}")" $ck
  for a in ${ARCHS[$r]}; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${r}_${a}_s$s" $r $a $s "$WORK/exp/${r}_s$s" $ROWS $st >> "$WORK/manifest.tsv"
    launch "$WORK/runs/${r}_${a}_s$s" "$WORK/exp/${r}_s$s" $a $limit; pids+=($LAST_PID)
  done
done; done
say "main: ${#pids[@]} processes, limit $limit s each"
progress "${pids[@]}" &
PROG=$!
for p in "${pids[@]}"; do wait $p; done
kill $PROG 2>/dev/null; wait $PROG 2>/dev/null
for d in "$WORK"/runs/*/; do say "trained $(basename $d): rc/wall $(cat $d/rc 2>/dev/null)"; done

# --- 4. evaluation of every trained model (in parallel; cut at the budget's end minus 10 s).
elim=$(( BUDGET_S - 10 - $(el) )); [ $elim -lt 20 ] && elim=20
say "evaluation: $EVAL_N prompts per model on $EVAL_DEVICE, limit $elim s"
pids=()
while IFS=$'\t' read -r name r a s exp rows st; do
  m="$exp/runs/$a/model"
  [ -f "$m/config.json" ] || m=$(ls -d "$exp/runs/$a"/checkpoint-* 2>/dev/null | sort | tail -1)
  [ -n "$m" ] && [ -f "$m/config.json" ] || continue
  basename "$m" > "$WORK/runs/$name/evaluated"
  ( OMP_NUM_THREADS=1 timeout -k 5 $elim python3 $HERE/eval_easy.py "$m" $EVAL_N "${EVAL_ARGS[$r]}" \
      --bin "$HLM" --device $EVAL_DEVICE --json "$WORK/runs/$name/eval.json" > "$WORK/runs/$name/eval.txt" 2>&1
    echo "[$(el) s] eval $name: $(head -c 300 "$WORK/runs/$name/eval.txt")" ) &
  pids+=($!)
  [ ${#pids[@]} -ge $(nproc) ] && { wait "${pids[0]}"; pids=("${pids[@]:1}"); }
done < "$WORK/manifest.tsv"
for p in "${pids[@]}"; do wait $p; done

# --- 5. summary and what comes back (at most 8 files under $OUT).
python3 $HERE/summarize.py "$WORK" "$OUT"
( cd "$WORK" && tar czf "$OUT/logs.tgz" manifest.tsv $( [ -f sizing.json ] && echo sizing.json ) runs cal \
    $(ls -d exp/*/config.json exp/*/config_given.json exp/*/runs/*/test.json exp/*/runs/*/niah_train.json \
      exp/*/runs/*/metrics.jsonl exp/*/training.csv calexp/*/config_given.json 2>/dev/null) ) 2>&1 | head -5
if [ "$KEEP_MODELS" = 1 ]; then
  ( cd "$WORK" && tar czf "$OUT/models.tgz" $(ls -d exp/*/runs/*/model 2>/dev/null) \
      $(while IFS=$'\t' read -r name r a s exp rows st; do e=$(cat runs/$name/evaluated 2>/dev/null)
          [[ "$e" == checkpoint-* ]] && echo exp/${r}_s$s/runs/$a/$e/config.json exp/${r}_s$s/runs/$a/$e/model.safetensors
        done < manifest.tsv) ) 2>&1 | head -5
  [ $(stat -c %s "$OUT/models.tgz" 2>/dev/null || echo 0) -gt 15000000 ] && { say "models.tgz over 15 MB: removed"; rm -f "$OUT/models.tgz"; }
fi
ls -la "$OUT"
say "done"
exec 1>&- 2>&-; sleep 1  # tee sees the end of its input and writes the rest of driver.log
