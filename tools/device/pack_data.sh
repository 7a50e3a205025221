#!/usr/bin/env bash
# pack_data.sh: packs the data a GPU study needs (made here by `make corpus` and `make deps`, git-ignored) into one
# archive for the device tool's `carry`, whose copy of the working tree has no data/ folder.
#
# Usage: bash tools/device/pack_data.sh OUT_TXZ [TOKENIZER]
#   TOKENIZER: a folder name under data/tokenizers (default qwen3).
#   Packs data/corpus/full (corpus.json and the .jsonl.zst files), data/tokenizers/TOKENIZER/tokenizer.json and
#   data/parallel/chromium_nway.jsonl with its manifest, xz-compressed (about 17 MB for the default set).
#   On the device, from the repository root:   tar xJf out/carry/data.txz
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 OUT_TXZ [TOKENIZER]" >&2; exit 2; }
out="$1"
tok="${2:-qwen3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
files=(data/corpus/full/corpus.json data/corpus/full/*.jsonl.zst "data/tokenizers/$tok/tokenizer.json"
       data/parallel/chromium_nway.jsonl data/parallel/chromium_nway.manifest.json)
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "pack_data: $f is missing (run make corpus and make deps first)" >&2; exit 2; }
done
mkdir -p "$(dirname "$out")"
tar cf - "${files[@]}" | xz -T2 -6 >"$out"
echo "pack_data: $(du -h "$out" | cut -f1) in $out (${#files[@]} files)"
