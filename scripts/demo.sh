#!/usr/bin/env bash
# make demo: until the placement study lands ([study]), the demo runs the best end-to-end job hybridlm has today:
# inspect two committed tiny models written by HF transformers (a dense Qwen3 and a hybrid OLMo-Hybrid with GDN
# layers), run a forward pass of each and dump every capture point. (Parity of these numbers with HF is checked by
# `make test`.) Writes a report under out/demo/ and prints its path.
set -euo pipefail
build_dir=${1:-build}
bin="$build_dir/hybridlm"
model=tests/golden/qwen3_untied
out=out/demo
mkdir -p "$out"
echo "demo: hybridlm inspect $model"
"$bin" inspect "$model" | tee "$out/inspect.txt"
"$bin" inspect "$model" --json > "$out/inspect.json"
ids=$(python3 -c "print(','.join(str((i * 37 + 11) % 320) for i in range(19)))" 2>/dev/null || echo 11,48,85,122,159)
echo "demo: hybridlm run $model --ids $ids --dump $out/captures.safetensors"
"$bin" run "$model" --ids "$ids" --top-k 5 --dump "$out/captures.safetensors" \
  --points attn_in,attn_delta,attn_out,mlp_delta,final_hidden,logits | tee "$out/run.txt"
{
  echo "# hybridlm demo report"
  echo
  echo "What ran: inspect and a forward pass of the tiny HF-generated model $model on CPU."
  echo "Capture points of every layer were dumped to captures.safetensors."
  echo "The study demo (five placements, distillation, SoftCKA) replaces this once [study] lands."
  echo
  echo '## inspect'; echo '```'; cat "$out/inspect.txt"; echo '```'
  echo '## run'; echo '```'; cat "$out/run.txt"; echo '```'
} > "$out/report.md"
hybrid=tests/golden/olmo_hybrid_tiny
echo "demo: hybridlm inspect $hybrid"
"$bin" inspect "$hybrid" | head -20 | tee "$out/inspect_hybrid.txt"
"$bin" run "$hybrid" --ids "$ids" --top-k 5 --dump "$out/captures_hybrid.safetensors" | tee "$out/run_hybrid.txt"
{
  echo '## hybrid model (OLMo-Hybrid, layout RRRA)'
  echo '```'; cat "$out/inspect_hybrid.txt"; cat "$out/run_hybrid.txt"; echo '```'
} >> "$out/report.md"
echo "demo: report at $out/report.md"
