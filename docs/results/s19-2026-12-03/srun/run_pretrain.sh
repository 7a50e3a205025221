#!/bin/bash
# The tiny pretrain of DistTrain.PretrainOnTwoAndThreeRanksEqualsOneProcess (8 steps x 6 rows x 64 tokens,
# micro-batch 1, one thread per rank) as one process and under `srun --mpi=pmix -n 2` (and -n 3 --overcommit),
# then a 2-rank step where rank 1 throws after step 2. Needs a running one-node Slurm (setup_slurm.sh) and the
# fixture's files in $FILES (tiny_qwen3.json, corpus/: written by the test fixture, test::write_tiny_corpus(.., 300)).
# Usage: run_pretrain.sh <hybridlm> <files dir> <out dir>
set -u
BIN=$1 FILES=$2 OUT=$3
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
args() {  # <out name>
  echo "pretrain --model-config $FILES/tiny_qwen3.json --lr 3e-3 --data $FILES/corpus --out $OUT/$1" \
       "--tokens $((8 * 6 * 64)) --seq-len 64 --batch 6 --micro-batch 1 --warmup-steps 2 --min-lr 1e-4" \
       "--held-out-docs 20 --eval-tokens 256 --eval-every 0 --checkpoint-every 0 --log-every 1000"
}
t() { local t0=$(date +%s.%N); "$@"; local rc=$?; echo "exit $rc after $(echo "$(date +%s.%N) - $t0" | bc) s"; }
rm -rf "$OUT"/pre1 "$OUT"/pre2 "$OUT"/pre3 "$OUT"/fail2
echo "== one process"; t $BIN $(args pre1) > "$OUT/pre1.log" 2>&1; tail -1 "$OUT/pre1.log"
echo "== srun --mpi=pmix -n 2"; t timeout -k 5 120 srun --mpi=pmix --kill-on-bad-exit=1 -n 2 $BIN $(args pre2)
echo "== srun --mpi=pmix -n 3 --overcommit"
t timeout -k 5 120 srun --mpi=pmix --kill-on-bad-exit=1 --overcommit -n 3 $BIN $(args pre3)
echo "== srun --mpi=pmix -n 2, rank 1 throws after step 2 (HYBRIDLM_FAULT=train.step@2:fail on SLURM_PROCID=1)"
t timeout -k 5 120 srun --mpi=pmix --kill-on-bad-exit=1 -n 2 \
  bash -c 'if [ "$SLURM_PROCID" = 1 ]; then export HYBRIDLM_FAULT=train.step@2:fail; fi; exec "$0" "$@"' \
  $BIN $(args fail2)
echo "== srun --mpi=pmix -n 2, HYBRIDLM_FAULT=train.step@2:fail on every rank"
t env HYBRIDLM_FAULT=train.step@2:fail timeout -k 5 120 srun --mpi=pmix --kill-on-bad-exit=1 -n 2 $BIN $(args failall2)
