#!/usr/bin/env bash
# Session 14, NIAH device call (issue #21 item 4): configs/niah/experiment-gpu-packed.json (packed rows, a 3-stage
# curriculum of haystacks 16/32 -> 64/128 -> 256/512 tokens, 3 x 6.29M tokens per architecture, answer loss), two
# architectures (full_attention and standard_periodic) as two processes side by side on one --out, each cut at LIMIT
# seconds, then --report-only. The data stage (3 x 3,280 rows, ~5 s) runs in the call, under the folder's lock.
# Carry: out/niahp (bins.txz: hybridlm built from d2aa05f + this change; corpus.tgz: data/corpus/demo without jsonl/).
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
LIMIT=${LIMIT:-170}
ARCHS=${ARCHS:-"full_attention standard_periodic"}
mkdir -p /tmp/hlm && tar xJf out/niahp/bins.txz -C /tmp/hlm || exit 3
[ -f data/corpus/demo/corpus.json ] || { mkdir -p data/corpus/demo && tar xzf out/niahp/corpus.tgz -C data/corpus/demo; } || exit 4
export LD_LIBRARY_PATH=/tmp/hlm/lib:${LD_LIBRARY_PATH:-}
H=/tmp/hlm/bin/hybridlm; C=configs/niah/experiment-gpu-packed.json; O=out/niahp/gpu; L=out/niahp/logs
mkdir -p "$O" "$L"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
(while true; do echo "$(( $(date +%s) - T0 )),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits)"; sleep 5; done) > "$L/smi.csv" 2>&1 &
SMI=$!
pids=()
for a in $ARCHS; do
  timeout "$LIMIT" "$H" niah experiment --config "$C" --out "$O" --device cuda --architectures "$a" \
    > "$L/$a.out" 2> "$L/$a.log" &
  pids+=($!)
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
tar czf "$OUT/niahp.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' --exclude='checkpoint-*' --exclude='data' "$O" "$L"
el "done"
