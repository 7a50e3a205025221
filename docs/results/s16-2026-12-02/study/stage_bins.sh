#!/usr/bin/env bash
# Session 16: stage the hybridlm binary (out/coord/study16.txz: built in the lead's worktree at 0f680f8, CUDA sm_90a)
# on the device machine outside the repository copy, so that the next call (on the same warm machine) can carry the
# data instead: the tree (39 MB) + binary (21 MB) + data (14 MB) exceed one call's 64 MiB.
set -u
mkdir -p /tmp/hlm16 && tar xJf out/coord/study16.txz -C /tmp/hlm16 || exit 3
LD_LIBRARY_PATH=/tmp/hlm16/lib /tmp/hlm16/bin/hybridlm --version 2>&1 | head -2
ls /tmp/hlm16/bin /tmp/hlm16/lib | head -30
