#!/usr/bin/env bash
# Session 27 ([niah] #21 item 4): session 26's multi-seed NIAH experiment (docs/results/s26-2026-12-04/niah_seeds/run.sh,
# unchanged) with the GDN-only architecture added (4 architectures x seeds 1-3 = 12 runs side by side under MPS) and
# the evaluation taken to the longest length these models allow: 64, 256, 1k, 4k, 8k, 16k, 32k tokens ("32k" = 32,000
# haystack tokens; the longest prompt, 32,634 bytes, plus 64 answer tokens stays within max_position_embeddings 32,768).
# The whole run needs more than one device call's 600 s, so the first call starts it in a process session of its own
# (setsid: it outlives the call while the machine stays held) and every call, the first included, waits for it up to
# POLL_S seconds, prints its progress and, once it has finished, copies its files into $OUT. Call again within the
# machine's idle window (30 s) until "finished" is printed. From the repository root, on the GPU machine:
#   mkdir -p /tmp/hlm && cat out/s1/hlm.part.* out/s2/hlm.part.* | tar xJf - -C /tmp/hlm   (first call only)
#   OUT=$OUT bash docs/results/s27-2026-12-04/niah_long/call.sh
# Variables: HLM (/tmp/hlm/bin/hybridlm), POLL_S (560), BUDGET_S (1150: run.sh's own deadline for everything),
# CORPUS_TGZ (out/niah_keys/corpus.tgz, first call only). The run works in a private copy (/tmp/niah_long/repo) of
# the scripts, the base config and the corpus, so later calls' copies of the tree cannot disturb it.
set -u
T0=$(date +%s)
D=/tmp/niah_long
OUT=${OUT:?}; POLL_S=${POLL_S:-560}; BUDGET_S=${BUDGET_S:-1150}
HLM=${HLM:-/tmp/hlm/bin/hybridlm}
if [ ! -f "$D/started" ]; then
  mkdir -p "$D/repo"
  cp -r --parents docs/results/s26-2026-12-04/niah_seeds configs/niah "$D/repo/" || { echo "FAILED: copying the scripts"; exit 3; }
  mkdir -p "$D/repo/data/corpus/demo"
  tar xzf "${CORPUS_TGZ:-out/niah_keys/corpus.tgz}" -C "$D/repo/data/corpus/demo" || { echo "FAILED: the corpus"; exit 4; }
  date -u +%FT%TZ > "$D/started"
  ( cd "$D/repo" && setsid nohup env HLM="$HLM" LD_LIBRARY_PATH=/tmp/hlm/lib OUT="$D/out" WORK="$D/work" FRESH=1 \
      ARCHS="full_attention standard_periodic reverse_periodic gdn" SEEDS="1 2 3" EVAL_LENGTHS=64,256,1k,4k,8k,16k,32k \
      BUDGET_S="$BUDGET_S" TRAIN_DEADLINE_S=$(( BUDGET_S - 60 )) EVAL_DEADLINE_S=$(( BUDGET_S - 25 )) \
      bash -c 'bash docs/results/s26-2026-12-04/niah_seeds/run.sh; echo "rc $?" > /tmp/niah_long/finished' \
      > "$D/console.log" 2>&1 < /dev/null & )
  echo "started $(cat "$D/started"): $HLM, budget $BUDGET_S s"
fi
while [ ! -f "$D/finished" ] && [ $(( $(date +%s) - T0 )) -lt "$POLL_S" ]; do sleep 5; done
grep -E 'progress|rc |FAILED|MPS' "$D/out/driver.log" 2>/dev/null | tail -n 6 | cut -c1-900
if [ -f "$D/finished" ]; then
  echo "finished: run.sh $(cat "$D/finished")"
  # The cost pass: the runs above shared the GPU (MPS), so their seconds per sample are not a clean time curve. Seed
  # 1's final model of each architecture, one process, the GPU otherwise idle: 2 languages (Latin, Han) x the single
  # task x 1k-32k, n 16 (one generate call of 16 sequences per cell). Time and peak state only; accuracy as it comes.
  if [ ! -f "$D/cost_done" ]; then
    M=(); for a in full_attention standard_periodic reverse_periodic gdn; do
      m=$D/work/exp-s1/runs/$a/stage-1/model  # a link per model: the folder name is its label in the reports
      [ -f "$m/config.json" ] && mkdir -p "$D/models" && ln -sfn "$m" "$D/models/$a" && M+=(--model "$D/models/$a"); done
    if [ ${#M[@]} -gt 0 ]; then
      ( cd "$D/repo" && timeout -k 5 "${COST_S:-240}" env LD_LIBRARY_PATH=/tmp/hlm/lib "$HLM" niah "${M[@]}" --tokenizer bytes \
          --langs eng_Latn,cmn_Hani --tasks single --lengths 1k,4k,8k,16k,32k --n 16 --seed 0 --max-new-tokens 64 \
          --stop '</Answer>' --max-batch 16 --prefill-chunk 8192 --held-out-docs 20 --corpus data/corpus/demo \
          --device cuda --precision bf16 --out "$D/cost" > "$D/cost.log" 2>&1 ); echo "cost pass rc $?" | tee -a "$D/cost.log"
    else echo "cost pass: no seed-1 final model" > "$D/cost.log"; fi
    touch "$D/cost_done"
    tar czf "$OUT/cost.tgz" -C "$D" cost cost.log 2>/dev/null || tar czf "$OUT/cost.tgz" -C "$D" cost.log
  fi
  cp "$D/out"/* "$OUT"/ 2>/dev/null; cp "$D/console.log" "$OUT"/ 2>/dev/null; ls -la "$OUT"
else
  echo "still running after this call's $POLL_S s: call again"
  cp "$D/out/driver.log" "$OUT"/ 2>/dev/null
fi
