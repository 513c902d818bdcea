#!/usr/bin/env bash
# Per-component ablation of the two layouts at translator_small's equal budget (2000 steps x 64 pairs, the same
# batches): each variant changes ONE thing of translator_small (modern) towards the paper layout, or of
# translator_vanilla towards the modern one, or the learning rate / warmup of one layout. Two runs side by side,
# one intra-op thread each (2 cores); each ends with its beam-5 test pass.
# Usage: bash experiments/translator/ablation.sh [seed ...]          (default: 1 2 3)
#        VARIANTS="small small+post vanilla" bash experiments/translator/ablation.sh 1   (a subset)
# ~16 min a pair of runs on the idle 2-core machine: all 21 variants x 3 seeds take ~9 hours.
# Ends with lab.report of the study against translator_small (seeds grouped, differences tested against seed noise).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${LAB_RUNS_DIR:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
source experiments/translator/variants.sh
read -r -a VARIANTS <<< "${VARIANTS:-${ORDER[*]}}"
SEEDS=("$@")
[ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
jobs=()
for seed in "${SEEDS[@]}"; do
  for v in "${VARIANTS[@]}"; do jobs+=("$v $seed"); done
done
for ((i = 0; i < ${#jobs[@]}; i += 2)); do  # two at a time
  for job in "${jobs[@]:i:2}"; do
    read -r v seed <<< "$job"
    # shellcheck disable=SC2086
    $PY -m lab.train ${ARGS[$v]} seed=$seed name="translator_ablation/$v/seed$seed" \
      logger.wandb.mode=disabled callbacks.progress=null &
  done
  wait
done
# the baseline is the first variant given: translator_small's runs, then every other variant's
others=$(ls -d "$RUNS"/translator_ablation/*/seed*/*/ | grep -v '/translator_ablation/small/')
# shellcheck disable=SC2086
$PY -m lab.report "$RUNS"/translator_ablation/small/seed*/*/ $others --out "$RUNS/translator_ablation" --metric test/bleu
