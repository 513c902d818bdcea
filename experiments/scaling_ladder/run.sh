#!/usr/bin/env bash
# The scaling ladder study (experiments/scaling_ladder/README.md): conf/ladder/cpu.yaml's five rungs x three
# variants (the gpt_nano_char baseline, the speedrun recipe, a top-1 MoE of 4 experts with the dense model's
# active parameters) x seeds, one multirun per variant, then lab.report's scaling view over all of them.
# Usage: bash experiments/scaling_ladder/run.sh [seeds]        (default 1,2,3)
#        VARIANTS="baseline fast" bash experiments/scaling_ladder/run.sh 1,2
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
SEEDS=${1:-1,2,3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A VARIANT=(
  [baseline]="name=ladder_baseline"
  [fast]="name=ladder_fast +recipe=speedrun"
  [moe]="name=ladder_moe +model.moe={num_experts:4,top_k:1}"
)
for v in ${VARIANTS:-baseline fast moe}; do
  # shellcheck disable=SC2086  # the variant's overrides are words
  nice -n 19 $PY -m lab.train -m +experiment=gpt_nano_char +ladder=cpu seed="$SEEDS" ${VARIANT[$v]} \
    logger.wandb.mode=disabled "hydra.sweep.dir=runs/scaling_ladder/$v"
done
# the baseline: the first variant found (runs/scaling_ladder/baseline sorts first)
$PY -m lab.report runs/scaling_ladder --budget finished --out experiments/scaling_ladder --wandb off
