#!/usr/bin/env bash
# Session 33, call 2: the binaries joined and unpacked (pieces carried in calls 1-2), the peer's FLA unpacked, then the
# GPU tests of session 32's code (loss_chunking_check.sh PARTS=tests) and the peer's optimizer step alone (peer_opt).
set -u
cp out/carry/all.txz.part.01 /tmp/keep/ && cp out/carry/anchors.txz /tmp/keep/
mkdir -p /tmp/hlm && cat /tmp/keep/all.txz.part.* | tar xJ -C /tmp/hlm && ls /tmp/hlm/bin
[ -d .anchors/fla ] || tar xJf /tmp/keep/anchors.txz
OUT=$OUT PARTS=tests,peer_opt bash tools/device/loss_chunking_check.sh
