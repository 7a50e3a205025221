#!/bin/bash
# The whole srun check of session 19 (issue #25 item 1), on the 2-core CPU machine: start a one-node Slurm, run the
# tiny pretrain of DistTrain.PretrainOnTwoAndThreeRanksEqualsOneProcess as one process, under `srun --mpi=pmix -n 2`
# and `-n 3 --overcommit`, and under `mpirun -np 2`; compare; a failing rank; srun without PMIx; a batch script;
# DistTrain.Srun* and LaunchEnv.*; stop Slurm. files/ holds the fixture's inputs (test::write_tiny_corpus(dir, 300),
# write_tiny_teacher_config). Usage (repository root): docs/results/s19-2026-12-03/srun/reproduce.sh [build dir]
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build-disthang}
BIN=$(realpath "$build/hybridlm") OUT=/tmp/hlm-srun-out
rm -rf "$OUT"; mkdir -p "$OUT"
"$here/setup_slurm.sh" start
echo "== environment of srun --mpi=pmix -n 2 (launch variables)"
timeout 60 srun --mpi=pmix -n 2 bash -c 'env | grep -E "^(SLURM_(STEP_ID|PROCID|LOCALID|NTASKS|STEP_NUM_TASKS)|PMIX_RANK|PMI_RANK|PMI_SIZE|OMPI_COMM_WORLD_[A-Z_]*)=" | sort | tr "\n" " "; echo'
echo "== environment of srun -n 1 mpirun -np 2 (Open MPI inside a step)"
timeout 60 srun -n 1 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 \
  bash -c 'env | grep -E "^(SLURM_(STEP_ID|PROCID|LOCALID|STEP_NUM_TASKS)|PMIX_RANK|OMPI_COMM_WORLD_(RANK|SIZE|LOCAL_RANK))=" | sort | tr "\n" " "; echo'
"$here/run_pretrain.sh" "$BIN" "$here/files" "$OUT"
echo "== mpirun -np 2 (the tests' launch)"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --oversubscribe --bind-to none -np 2 \
  "$BIN" pretrain --model-config "$here/files/tiny_qwen3.json" --lr 3e-3 --data "$here/files/corpus" --out "$OUT/mp2" \
  --tokens 3072 --seq-len 64 --batch 6 --micro-batch 1 --warmup-steps 2 --min-lr 1e-4 --held-out-docs 20 \
  --eval-tokens 256 --eval-every 0 --checkpoint-every 0 --log-every 1000 > "$OUT/mp2.log" 2>&1
echo "mpirun exit $?"
cd "$OUT"
for r in pre2 pre3 mp2; do echo "== $r against one process"; python3 "$here/compare.py" pre1 $r; done
echo "== srun -n 2 against mpirun -np 2"; python3 "$here/compare.py" mp2 pre2 | tail -2
cmp mp2/model/model.safetensors pre2/model/model.safetensors && echo "final weights: bit-identical files"
for r in pre1 pre2 pre3; do echo "$r: $(grep -o '"world_size": *[0-9]*' $r/config.json)"; done
echo "== srun -n 2 without --mpi=pmix (MpiDefault=none)"
OMP_NUM_THREADS=1 timeout -k 5 60 srun --kill-on-bad-exit=1 -n 2 "$BIN" pretrain --model-config "$here/files/tiny_qwen3.json" \
  --data "$here/files/corpus" --out "$OUT/nompi2" --tokens 3072 --seq-len 64 --batch 6 --micro-batch 1 2>&1 | grep -v '^$' | head -8
echo "exit ${PIPESTATUS[0]}; out dir written: $([ -e "$OUT/nompi2" ] && echo yes || echo no)"
echo "== srun -n 3 on 2 CPUs without --overcommit (20 s limit)"
timeout 20 srun -n 3 true; echo "exit $? (124: still waiting when timeout ended it)"
echo "== sbatch -n 2 batch.sh"
sbatch -n 2 -o "$OUT/batch.out" --wait "$here/batch.sh" "$BIN" "$here/files" "$OUT"; cat "$OUT/batch.out"
python3 "$here/compare.py" pre1 batch1 | tail -2; python3 "$here/compare.py" pre2 batch2 | tail -2
cd - >/dev/null
echo "== test_dist: DistTrain.Srun* and LaunchEnv.*"
"$build/tests/test_dist" --gtest_filter='DistTrain.Srun*:LaunchEnv.*' 2>&1 | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) |srun|vs'
"$here/setup_slurm.sh" stop
echo "== with Slurm stopped"
timeout 15 scontrol ping; echo "scontrol ping exit $?"
"$build/tests/test_dist" --gtest_filter='DistTrain.Srun*' 2>&1 | grep -E 'SKIPPED|Skipped|no srun' | head -3
