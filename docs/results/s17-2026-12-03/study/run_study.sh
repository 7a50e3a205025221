#!/usr/bin/env bash
# Session 17: one placement study on the H200 (the binary staged by stage_bins.sh in /tmp/hlm17, the data carried in
# out/coord/data.txz). Usage: run_study.sh CONFIG NAME [TIMEOUT_S]. A second call on the same warm machine resumes
# the study (finished stages are skipped; an interrupted distillation resumes from its newest checkpoint).
# Everything but the model weights goes to $OUT/NAME.tgz, the log to $OUT/NAME/study.log.
set -u
cfg=$1 name=$2 limit=${3:-540}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
[ -x /tmp/hlm17/bin/hybridlm ] || { echo "binary not staged (run stage_bins.sh first on this machine)"; exit 3; }
[ -f data/corpus/full/corpus.json ] || tar xJf out/coord/data.txz || exit 3
export LD_LIBRARY_PATH=/tmp/hlm17/lib
CUDNN_DIR=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))')
export HLM_CUDNN_LIB=$CUDNN_DIR/libcudnn.so.9 LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CUDNN_DIR
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
el "study $name start ($cfg)"
timeout $limit /tmp/hlm17/bin/hybridlm study --config $cfg --out /tmp/study_$name >> /tmp/study_$name.log 2>&1
rc=$?; el "study $name rc $rc"
mkdir -p $OUT/$name
cp /tmp/study_$name.log $OUT/$name/study.log
# one archive: the device tool brings back a limited number of files and folder depths
(cd /tmp/study_$name && find . -type f ! -name '*.safetensors' ! -path '*checkpoint*' -size -8M | tar czf $OUT/$name.tgz -T -)
grep -E "^study \[|^study:" /tmp/study_$name.log | tail -40
exit $rc
