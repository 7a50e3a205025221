#!/usr/bin/env bash
# Session 17: stage the hybridlm binary (out/coord/study17.txz: built in the lead's worktree at f20eff3, CUDA sm_90a)
# on the device machine outside the repository copy, so that the next call (on the same warm machine, within its
# 30-s idle window) can carry the data instead: tree + binary + data exceed one call's 64 MiB.
set -u
mkdir -p /tmp/hlm17 && tar xJf out/coord/study17.txz -C /tmp/hlm17 || exit 3
LD_LIBRARY_PATH=/tmp/hlm17/lib /tmp/hlm17/bin/hybridlm --version 2>&1 | head -2
