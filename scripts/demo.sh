#!/usr/bin/env bash
# make demo: the embedded default placement study (`hybridlm study`, docs/study.md) on the demo corpus of
# `make corpus-demo`: a tiny Qwen3 teacher (8 layers, hidden 64, bytes) pretrained briefly, converted into hybrid
# students for the five placements at 25 % full attention, each distilled alike, SoftCKA and locality on the demo
# parallel set, and one self-contained HTML report. Prints the report's path. A rerun skips the finished stages.
set -euo pipefail
build_dir=${1:-build}
bin="$build_dir/hybridlm"
out=out/demo-study
for f in data/corpus/demo/corpus.json data/parallel-demo/chromium_nway.jsonl; do
  [ -f "$f" ] || { echo "demo: $f is missing; run \`make corpus-demo\` first" >&2; exit 2; }
done
# The models are tiny: with more than one thread a step spends most of its time spinning in libgomp and OpenBLAS
# (docs/training.md, "Notes and limits"), so each of the study's processes runs on one.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# A study directory belongs to one config; when the compiled-in defaults changed since the last demo, start over.
if [ -f "$out/study_config.json" ] && ! "$bin" study --print-default-config | cmp -s - "$out/study_config.json"; then
  echo "demo: the default study config changed since $out was made; starting over"
  rm -rf "$out"
fi
# Independent stages (the distillations, then SoftCKA and locality of each model) run side by side, one process per
# core (up to 4: the demo has at most that many stages ready at once); the results are those of one job.
jobs=$(nproc 2>/dev/null || echo 1)
[ "$jobs" -gt 4 ] && jobs=4
start=$(date +%s)
"$bin" study --jobs "$jobs" --out "$out"
echo "demo: finished in $(( $(date +%s) - start )) s"
echo "demo: report at $out/report/report.html"
