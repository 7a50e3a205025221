#!/usr/bin/env bash
# Session 28 ([infer] #18), call C: which of the decode attention's three dependent launches help. Call B: all three
# on (HLM_PDL_ATTN=on) made olmo3_7b 0.09-0.12 ms per step faster and qwen3_4b 0.17-0.19 ms slower. Here each part
# off in turn (HLM_PDL_ATTN = a comma list of qk, split, merge), batch 1, L 1024, 128 steps, graphs, interleaved.
# From the repository root on the GPU machine, binaries unpacked in /tmp/hlm:  OUT=$OUT bash .../callC.sh
set -u
B=/tmp/hlm/bin; export LD_LIBRARY_PATH=/tmp/hlm/lib
W=/tmp/callC; rm -rf $W; mkdir -p "$W"
finish() { tar czf "$OUT/callC.tgz" -C /tmp callC; }
trap finish EXIT
run() {  # label model env...
  local label=$1 m=$2; shift 2
  timeout 100 env "$@" "$B/bench_generate" --models "$m" --contexts 1024 --batches 1 --decode-steps 128 \
    --cuda-graphs on --out "$W/bg_${m}_$label" > "$W/bg_${m}_$label.log" 2>&1
  echo "$m $label rc $?: $(grep -E "^\| $m " "$W/bg_${m}_$label.log" | awk -F'|' '{print $9 " ms/step"}')"
}
for m in qwen3_4b olmo3_7b; do
  for v in on off qk split merge split,merge on; do run "$v" $m HLM_PDL_ATTN=$v; done
done
for v in split,merge off on; do run "$v" olmo_hybrid_7b HLM_PDL_ATTN=$v; done
