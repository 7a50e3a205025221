#!/usr/bin/env bash
# Session 12, NIAH device call (issue #21 item 4): the trained retrieval experiment of configs/niah/experiment-gpu.json
# (answer loss, 25.2M training tokens per architecture, bf16 evaluation at 1K-8K) with the four architectures as four
# processes side by side on the one H200, all on one --out (the data stage runs once, under the folder's lock), each
# cut at LIMIT seconds (a cut evaluation keeps its finished cells, shortest length first), then --report-only for
# the reports over all four. Run from the repository root with out/niah2/bins.txz and out/niah2/corpus.tgz carried
# (the demo corpus without its 9.8 MB jsonl/ intermediate folder: `tar czf out/niah2/corpus.tgz -C data/corpus/demo
# --exclude=jsonl .`, so that the carry stays under 64 MiB with the binaries).
# First the CUDA NIAH tests (tests/cuda_models/test_cuda_niah_cli.cpp: fp32 CUDA = CPU, bf16 plans, the backend).
# HLM_QK_FUSE=off: the engine's attention mixer keeps its five launches (ad57a67's fused q/k norm + RoPE + cache write
# had not run on a GPU when this binary was built; this call measures the NIAH experiment, not that kernel).
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
set -u
LIMIT=${LIMIT:-420}
export HLM_QK_FUSE=off
mkdir -p /tmp/hlm && tar xf out/niah2/bins.txz -C /tmp/hlm || exit 3
[ -f data/corpus/demo/corpus.json ] || { mkdir -p data/corpus/demo && tar xzf out/niah2/corpus.tgz -C data/corpus/demo; } || exit 4
export LD_LIBRARY_PATH=/tmp/hlm/lib:${LD_LIBRARY_PATH:-}
H=/tmp/hlm/bin/hybridlm; C=configs/niah/experiment-gpu.json; O=out/niah2/gpu; L=out/niah2/logs
mkdir -p "$O" "$L"  # a warm machine that holds $O from an earlier call continues it (finished stages skipped)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
HLM_GOLDEN_DIR=$PWD/tests/golden HLM_BINARY=$H timeout 60 /tmp/hlm/bin/test_cuda_models --gtest_filter='CudaNiah*' \
  > "$L/test_cuda_niah.log" 2>&1; el "CUDA NIAH tests rc $?"; grep -E "^\[ +(OK|FAILED|PASSED) +\]|Failure" "$L/test_cuda_niah.log" | head -20
(while true; do echo "$(( $(date +%s) - T0 )),$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits)"; sleep 5; done) > "$L/smi.csv" 2>&1 &
SMI=$!
pids=()
for a in full_attention standard_periodic reverse_periodic gdn; do
  timeout "$LIMIT" "$H" niah experiment --config "$C" --out "$O" --device cuda --architectures "$a" \
    > "$L/$a.out" 2> "$L/$a.log" &
  pids+=($!)
done
i=0
for a in full_attention standard_periodic reverse_periodic gdn; do
  wait "${pids[$i]}"; el "$a rc $?"; i=$((i + 1))
done
kill "$SMI" 2>/dev/null
"$H" niah experiment --config "$C" --out "$O" --report-only > "$L/report.out" 2> "$L/report.log"; el "report rc $?"
for a in full_attention standard_periodic reverse_periodic gdn; do
  echo "== $a"; grep -E "^(parameters|memory plan|valid|niah experiment: (training|resuming))|step (64|384|768)/" "$L/$a.log" | cut -c1-200
  grep -E "niah experiment: eval" "$L/$a.log" | tail -2 | cut -c1-200; tail -3 "$L/$a.log" | grep -iE "error|what" | cut -c1-300
done
sed -n '1,60p' "$O/report.md" | cut -c1-400
tar czf "$OUT/niah2.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' --exclude='checkpoint-*' "$O" "$L"
el "done"
