#!/usr/bin/env bash
# What call 3 ran (the device budget left ~330 s): run.sh without the data-parallel suite and with 90 s for the model tests.
sed -e 's#^timeout 150 /tmp/hlm/bin/test_dist_cuda.*#echo "dist skipped (device budget)"#' -e 's#^timeout 150 /tmp/hlm/bin/test_cuda_models#timeout 90 /tmp/hlm/bin/test_cuda_models#' docs/results/s19-2026-12-03/call3/run.sh > /tmp/r.sh && BUDGET=290 bash /tmp/r.sh 2>&1
