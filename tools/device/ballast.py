#!/usr/bin/env python3
"""Holds GPU 0's memory so that FREE_GIB stay free, to run a program as if on a smaller device (e.g. the seed's
48-GB card: 46 GiB less the measured program's own CUDA context, which must exist before the ballast is taken).

usage: python3 tools/device/ballast.py FREE_GIB READY_FILE [SECONDS]
Prints the device's total and free memory before and after, touches READY_FILE once the ballast is held, then sleeps
SECONDS (default 3600) or until killed. Needs torch (the GPU machine's Python has it). Used by the [memory] calls of
sessions 19-20 (docs/results/s19-2026-12-03/call2/, s20-2026-12-03/callA-B/), which inlined the same lines."""
import sys
import time

import torch

keep = int(float(sys.argv[1]) * 2**30)
ready = sys.argv[2]
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0
free, total = torch.cuda.mem_get_info()
if free <= keep:
    sys.exit(f"ballast: only {free / 2**30:.2f} GiB free, asked to leave {keep / 2**30:.2f}")
ballast = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
free_after, _ = torch.cuda.mem_get_info()
print(f"total {total / 2**30:.2f} GiB, free before {free / 2**30:.2f}, ballast {ballast.numel() / 2**30:.2f}, "
      f"free after {free_after / 2**30:.2f} GiB", flush=True)
open(ready, "w").close()
time.sleep(seconds)
