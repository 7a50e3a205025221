#!/bin/bash
# sbatch -n 2 batch.sh <hybridlm> <files dir> <out dir>: in the batch script's own shell (SLURM_PROCID=0, no
# SLURM_STEP_ID) hybridlm is one process (world_size 1, no MPI); `srun --mpi=pmix` from the script starts 2 ranks.
BIN=$1 FILES=$2 OUT=$3
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
A="pretrain --model-config $FILES/tiny_qwen3.json --lr 3e-3 --data $FILES/corpus --tokens 3072 --seq-len 64 --batch 6
   --micro-batch 1 --warmup-steps 2 --min-lr 1e-4 --held-out-docs 20 --eval-tokens 256 --eval-every 0
   --checkpoint-every 0 --log-every 1000"
echo "batch shell: $(env | grep -E '^SLURM_(STEP_ID|PROCID|NTASKS)=' | sort | tr '\n' ' ')"
rm -rf "$OUT/batch1" "$OUT/batch2"
$BIN $A --out "$OUT/batch1" > "$OUT/batch1.log" 2>&1; echo "one process in the batch shell: exit $?"
srun --mpi=pmix --kill-on-bad-exit=1 $BIN $A --out "$OUT/batch2" > "$OUT/batch2.log" 2>&1; echo "srun: exit $?"
for r in batch1 batch2; do echo "$r: $(grep -o "\"world_size\": *[0-9]*" "$OUT/$r/config.json")"; done
