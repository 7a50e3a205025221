#!/usr/bin/env bash
# Session 12, call 4 (hybridlm and bench_generate of 89db306, built here; c4.txz). Two parts, the second skipped when
# the call's budget is short:
#   1. [scaling] the GPU ladder on the full package corpus (configs/scaling-ladder-gpu-pkg.json: 3 architectures ×
#      5 sizes × 3 ratios, one process per architecture side by side, then the fit over the 45 points); the corpus
#      travels as data/corpus/ladder (corpus.json + *.jsonl.zst, 11 MiB) and is linked as data/corpus/full;
#   2. [infer] the longest prefill of a Qwen3-4B-shaped full-attention model within 48 GB with the cuDNN attention
#      engine (session 10 predicted 262,144 tokens in 385 s with the native kernels, none run).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-560}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c4.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r H=/tmp/hlm/bin/hybridlm
rm -rf data/corpus/full && ln -s ladder data/corpus/full && mkdir -p /tmp/L && date +%s > /tmp/L/t0
for a in transformer hybrid gdn; do
  timeout 330 $H scaling ladder --config configs/scaling-ladder-gpu-pkg.json --out /tmp/L/$a --device cuda --architectures $a > /tmp/L/$a.log 2>&1 &
done
wait; date +%s > /tmp/L/t1; el "ladder trained"
head -1 /tmp/L/gdn/runs.csv > /tmp/L/runs.csv
for a in transformer hybrid gdn; do tail -n +2 /tmp/L/$a/runs.csv >> /tmp/L/runs.csv; done
timeout 120 $H scaling fit --points /tmp/L/runs.csv --out /tmp/L/fit --grid olmo:4 --bounds olmo --bootstrap 200 --seed 0 \
  --fixed-exponents 0.22 --flops 1e14,1e15,1e16,1e17,1e18 --savings-n 1e5,3e5,1e6,3e6,1e7 --reference transformer \
  --quiet > /tmp/L/fit.log 2>&1; el "fit rc $?"; date +%s > /tmp/L/t2
(cd /tmp/L && tar czf $OUT/ladder.tgz t0 t1 t2 runs.csv fit *.log */ladder.json */runs.csv */runs/*/metrics.jsonl */runs/*/test.json 2>/dev/null)
wc -l /tmp/L/runs.csv; tail -c 600 /tmp/L/gdn.log; cat /tmp/L/fit/parameters.md 2>/dev/null | head -20
if [ $(left) -gt 150 ]; then
  CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
  export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
  LIM=$(( $(left) - 15 ))
  HLM_ATTENTION_ENGINE=cudnn timeout $LIM $B/bench_generate --search-context --models qwen3_4b --memory-caps 48G \
    --prefill-chunk 8192 --search-time-limit $(( LIM - 60 )) --out $R/search > $R/search.log 2>&1; el "search rc $?"
  tail -12 $R/search.log | cut -c1-240; cat $R/search/*.md 2>/dev/null | head -12
else
  el "skip the prefill search ($(left) s left)"
fi
tar czf $OUT/logs.tgz -C $OUT r
