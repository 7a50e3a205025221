#!/usr/bin/env bash
# Session 11, device call 4: Table 8's 32K rows measured at the largest batch (bench_generate's `max` needs a smaller
# batch first: its memory sizes the largest one). The hybrid first; the full-attention model with what is left.
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p /tmp/hlm && tar xf out/coord/c3.txz -C /tmp/hlm || exit 3
export LD_LIBRARY_PATH=/tmp/hlm/lib:${LD_LIBRARY_PATH:-}
B=/tmp/hlm/bin; R=$OUT/r; mkdir -p $R
timeout 170 $B/bench_generate --models olmo_hybrid_7b --contexts 32768 --batches 4,max --decode-steps 8 --prefill-chunk 8192 \
  --out $R/t8_hyb32k > $R/t8_hyb32k.log 2>&1; el "hybrid 32K rc $?"; grep -E "^\| olmo" $R/t8_hyb32k.log
tar czf $OUT/r.tgz -C $OUT r
timeout 100 $B/bench_generate --models olmo3_7b --contexts 32768 --batches 2,max --decode-steps 8 --prefill-chunk 8192 \
  --out $R/t8_full32k > $R/t8_full32k.log 2>&1; el "full 32K rc $?"; grep -E "^\| olmo" $R/t8_full32k.log
tar czf $OUT/r.tgz -C $OUT r
el end
