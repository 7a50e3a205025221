#!/usr/bin/env bash
# Session 27 ([niah] #21): the NIAH cost curve past the trained models' 32,768 positions, to 128k tokens. Cost (seconds
# per sample, peak inference state) does not depend on the weights, so this call makes the four architectures of
# call.sh's experiment (same config, seed 1) with a single training step per stage (the experiment's own model
# making; their accuracy means nothing and is not reported) and max_position_embeddings raised to 262,144 (RoPE
# "default" does not depend on it; the harness refuses prompts past it), then evaluates each alone on the GPU:
# eng_Latn and cmn_Hani, the single task, 16k / 32k / 64k / 128k haystack tokens, 16 samples per cell (one generate
# call of 16 sequences). From the repository root on the GPU machine (corpus as in call.sh):
#   HLM=/tmp/hlm/bin/hybridlm LD_LIBRARY_PATH=/tmp/hlm/lib OUT=$OUT bash docs/results/s27-2026-12-04/niah_long/cost_long.sh
# Writes $OUT/cost_long.tgz (the experiment's report.md, niah.csv per architecture, logs; no weights) and prints the
# cost table.
set -u
HLM=${HLM:?}; OUT=${OUT:?}; W=${W:-/tmp/niah_cost_long}
rm -rf "$W"; mkdir -p "$W"
if [ ! -f data/corpus/demo/corpus.json ]; then
  mkdir -p data/corpus/demo && tar xzf "${CORPUS_TGZ:-out/niah_keys/corpus.tgz}" -C data/corpus/demo || exit 4
fi
python3 docs/results/s26-2026-12-04/niah_seeds/make_config.py "$W/config.json" --seed 1 --steps0 1 --steps1 1 \
  --checkpoint-every 1 --archs full_attention,standard_periodic,reverse_periodic,gdn --eval-lengths "${EVAL_LENGTHS:-16k,32k,64k,128k}" ${TINY:+--tiny} --device "${DEVICE:-cuda}" --precision "${PRECISION:-bf16}" \
  --langs eng_Latn,cmn_Hani --eval-n 16 || exit 5
python3 - "$W/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
c["model"]["max_position_embeddings"] = 262144
c["eval"]["tasks"] = ["single"]
c["train"]["eval_every_tokens"] = 0
json.dump(c, open(p, "w"), indent=2)
PY
timeout -k 5 "${LIMIT_S:-420}" "$HLM" niah experiment --config "$W/config.json" --out "$W/exp" --device "${DEVICE:-cuda}" \
  > "$W/experiment.out" 2> "$W/experiment.log"; echo "experiment rc $?"
grep -E "niah experiment: eval" "$W/experiment.log" | tail -n 40 | cut -c1-200
sed -n '/Cost/,/^$/p;/s\/sample/,/^$/p' "$W/exp/report.md" 2>/dev/null | head -20
( cd "$W" && tar czf "$OUT/cost_long.tgz" --exclude='*.safetensors' --exclude='*.jsonl.zst' --exclude='checkpoint-*' \
    --exclude='exp/data' config.json experiment.out experiment.log exp )
