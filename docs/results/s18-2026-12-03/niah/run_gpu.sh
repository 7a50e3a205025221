#!/usr/bin/env bash
# Session 17 wrote it, session 18 ran it (two architectures per call): the NIAH device call for configs/niah/experiment-gpu-long.json (packed rows, stage 1
# haystacks 16/32 for 2,048 steps x 16 rows x 2048 tokens = 84,817 examples, stage 2 64/128/256 for 512 steps =
# 17,606 examples; answer loss; 10 languages in 7 scripts), one process per architecture on one --out, each cut at
# LIMIT seconds, then --report-only. With NGPU > 1 (nvidia-h200-x4) process i gets GPU i mod NGPU.
# Carry: out/niahl (bins.txz: hybridlm; corpus.tgz: data/corpus/demo without jsonl/), as session 14 did:
#   ninja -C build-<you> hybridlm   (a CUDA build)
#   XZ_OPT="-9 -T2" bash tools/device/pack_binaries.sh out/niahl/bins.txz build-<you>/hybridlm
#   tar czf out/niahl/corpus.tgz -C data/corpus/demo --exclude=jsonl .
# Device: ARCHS="full_attention" LIMIT=300 bash docs/results/s17-2026-12-03/niahdbg/run_gpu.sh     (first check)
#         NGPU=4 LIMIT=480 bash docs/results/s17-2026-12-03/niahdbg/run_gpu.sh                    (all four)
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
LIMIT=${LIMIT:-480}
NGPU=${NGPU:-1}
ARCHS=${ARCHS:-"full_attention standard_periodic reverse_periodic gdn"}
[ -x /tmp/hlm/bin/hybridlm ] || { mkdir -p /tmp/hlm && tar xJf out/niahl_bins/bins.txz -C /tmp/hlm; } || exit 3   # staged by an earlier call on the warm machine (binary + corpus exceed one carry)
[ -f data/corpus/demo/corpus.json ] || { mkdir -p data/corpus/demo && tar xzf out/niahl/corpus.tgz -C data/corpus/demo; } || exit 4
export LD_LIBRARY_PATH=/tmp/hlm/lib:${LD_LIBRARY_PATH:-}
H=/tmp/hlm/bin/hybridlm; C=${CONFIG:-configs/niah/experiment-gpu-long.json}; O=${OUTDIR:-out/niahl/gpu}; L=$O-logs
mkdir -p "$O" "$L"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader
(while true; do echo "$(( $(date +%s) - T0 )),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | tr '\n' ' ')"; sleep 5; done) > "$L/smi.csv" 2>&1 &
SMI=$!
pids=(); i=0
for a in $ARCHS; do
  CUDA_VISIBLE_DEVICES=$((i % NGPU)) timeout "$LIMIT" "$H" niah experiment --config "$C" --out "$O" --device cuda \
    --architectures "$a" > "$L/$a.out" 2> "$L/$a.log" &
  pids+=($!); i=$((i + 1))
done
i=0
for a in $ARCHS; do wait "${pids[$i]}"; el "$a rc $?"; i=$((i + 1)); done
kill "$SMI" 2>/dev/null
"$H" niah experiment --config "$C" --out "$O" --report-only > "$L/report.out" 2> "$L/report.log"; el "report rc $?"
for a in $ARCHS; do
  echo "== $a"; grep -E "^(parameters|valid)|niah experiment: (training|resuming)|step [0-9]+/" "$L/$a.log" | cut -c1-160 | tail -40
  grep -E "niah experiment: eval" "$L/$a.log" | tail -2 | cut -c1-200; tail -3 "$L/$a.log" | grep -iE "error|what" | cut -c1-300
done
sed -n '1,40p' "$O/report.md" | cut -c1-300
tar czf "$OUT/niahl.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' --exclude='checkpoint-*' --exclude='data' "$O" "$L"
el "done"
