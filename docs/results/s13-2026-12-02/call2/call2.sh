#!/usr/bin/env bash
# Session 13, call 2 (bench_generate of the lead's build; c1.txz): [infer] item 5(b), the longest prefill of the
# Qwen3-4B-shaped 25 %-attention hybrid within 48 GiB and within the whole H200 (attention engine: the default,
# cuDNN where it loads). A prefill predicted (quadratic extrapolation from three timed probes) to take longer than
# --search-time-limit is not run and is marked "predicted".
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
BUDGET=${BUDGET:-560}; left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p $OUT/r /tmp/hlm && tar xJf out/coord/c1.txz -C /tmp/hlm && export LD_LIBRARY_PATH=/tmp/hlm/lib
B=/tmp/hlm/bin R=$OUT/r
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9
LIM=$(( $(left) - 15 ))
timeout $LIM $B/bench_generate --search-context --models ${MODELS:-qwen3_4b_hybrid} --memory-caps ${CAPS:-48G,device} \
  --prefill-chunk 8192 --search-time-limit ${TLIM:-$(( LIM - 120 ))} --out $R/search > $R/search.log 2>&1; el "search rc $?"
tail -20 $R/search.log | cut -c1-240; cat $R/search/*.md 2>/dev/null | head -12
tar czf $OUT/logs.tgz -C $OUT r
