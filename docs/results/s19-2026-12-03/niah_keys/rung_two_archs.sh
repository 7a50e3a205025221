#!/usr/bin/env bash
# Session 17 sanity ladder, one rung: bash rung.sh NAME "MAKE_EASY_ARGS" SEQ_LEN ROWS STEPS LR LAYERS HIDDEN [KV]
# Session 19 copy: trains full_attention then standard_periodic (config key "architectures"; the first must be full_attention).
# EXTRA='{"train.micro_batch_rows": 1}' overrides config keys (section.key).
# Writes out/niahdbg/NAME (config, easy data, the training log); needs build-niahdbg/hybridlm (CPU build).
set -euo pipefail
name=$1 easy=$2 seq=$3 rows=$4 steps=$5 lr=$6 layers=$7 hidden=$8 kv=${9:-2}
out=out/niahdbg/$name; mkdir -p $out
heads=$((hidden / 16))
python3 - "$out/config_given.json" $seq $rows $steps $lr $layers $hidden $heads $kv <<'PY'
import json, sys
path, seq, rows, steps, lr, layers, hidden, heads, kv = sys.argv[1], *map(float, sys.argv[2:])
c = json.load(open("configs/niah/experiment-cpu-short.json"))
c["model"].update({"num_hidden_layers": int(layers), "hidden_size": int(hidden), "intermediate_size": int(3 * hidden),
                   "num_attention_heads": int(heads), "num_key_value_heads": int(kv), "head_dim": 16})
c["train"].update({"tokens": int(steps * rows * seq), "seq_len": int(seq), "batch_rows": int(rows),
                   "micro_batch_rows": int(rows), "lr": lr, "min_lr": lr / 10, "log_every_steps": 10})
c["train_data"]["lengths"] = [8]
import os
for k, v in json.loads(os.environ.get("EXTRA", "{}")).items():
    sec, key = k.split(".")
    c[sec][key] = v
c["architectures"] = ["full_attention", "standard_periodic"]; c["full_fraction"] = 0.25
c["eval"].update({"lengths": [8], "n": 1, "max_batch": 1})
json.dump(c, open(path, "w"), indent=1)
PY
bin=build-niahdbg/hybridlm
# data stage with the real generator (writes the marker), then replace the corpus with the easy examples
if [ ! -f $out/data/easy.txt ]; then
  docs=$(python3 -c "import math;print(math.ceil(1.05*$steps*$rows*$seq/$seq)+8)")
  mkdir -p $out/data
  echo '{"documents": '$docs', "examples": '$docs', "exact": '$docs', "tokens": '$((docs*seq))', "seq_len": '$seq', "note": "session 17 easy data (make_easy.py)"}' > $out/data/niah_train_data.json
  python3 docs/results/s17-2026-12-03/niahdbg/make_easy.py $out/data --seq-len $seq --docs $docs $easy > $out/data/easy.txt
fi
cat $out/data/easy.txt | head -2
start=$(date +%s)
nice -n 5 $bin niah experiment --config $out/config_given.json --out $out > $out/train.log 2>&1 || echo "rc $?"
echo "wall $(( $(date +%s) - start )) s"
grep -E '^step' $out/train.log | awk 'NR%4==0' | cut -c1-80
python3 -c "import json;r=[json.loads(l) for l in open('$out/runs/full_attention/metrics.jsonl')];print([ (k,r[-1].get(k)) for k in r[-1]][:8])" 2>/dev/null || true
cat $out/runs/full_attention/test.json 2>/dev/null | head -c 400; echo
