#!/usr/bin/env bash
# translator_small vs translator_vanilla at an equal budget (same steps, tokens per step, batches, seed).
# Each seed trains the two layouts side by side, one intra-op thread each (2 cores); every run ends with
# its beam-5 test pass, then lab.eval decodes the same test split greedily.
# Usage: bash experiments/translator/run.sh [seed ...]   (default: 1 2 3); ends with the lab.report of the study.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${LAB_RUNS_DIR:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
LAYOUTS=(translator_small translator_vanilla)
SEEDS=("$@")
[ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for seed in "${SEEDS[@]}"; do
  for e in "${LAYOUTS[@]}"; do
    $PY -m lab.train +experiment=$e seed=$seed name=translator_study/$e/seed$seed \
      logger.wandb.mode=disabled callbacks.progress=null &
  done
  wait
  for e in "${LAYOUTS[@]}"; do
    run=$(ls -d "$RUNS/translator_study/$e/seed$seed"/*/ | tail -n 1)
    $PY -m lab.eval ckpt_path="$(ls "$run"checkpoints/best-step*.ckpt | tail -n 1)" +task.test_decoding.beam_size=1 \
      > "$run"test_greedy.txt
  done
done
$PY -m lab.report "$RUNS"/translator_study/*/seed*/* --out "$RUNS/translator_study" --baseline translator_small
