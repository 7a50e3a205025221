#!/usr/bin/env bash
# Session 19: session 17's rung.sh with "architectures": ["full_attention", "standard_periodic"] (the first must be
# full_attention), made on the fly exactly as K2long_sp ran it. Same arguments as rung.sh.
set -euo pipefail
sed 's#c\["eval"\].update#c["architectures"] = ["full_attention", "standard_periodic"]; c["full_fraction"] = 0.25\nc["eval"].update#' \
  docs/results/s17-2026-12-03/niahdbg/rung.sh > /tmp/rung_two_archs_$$.sh
exec bash /tmp/rung_two_archs_$$.sh "$@"
