#!/usr/bin/env bash
# The MoE ablation study: one run per variant, sequentially (2 shared CPU cores), each ~2-3 minutes.
# Base: conf/experiment/moe_ablation.yaml (8 experts x 256, top-2, capacity 1.25 / eval 2.0, aux 0.01).
# Usage: bash experiments/moe_ablation/run.sh [label ...]   (no label: all); ends with the lab.report of the study.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
# one intra-op thread: on a shared, oversubscribed CPU, 2 OpenMP threads per process spin at every barrier
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A VARIANTS=(
  [dense_equal_active]="model.moe=null"
  [dense_equal_total]="model.moe=null model.d_ff=2048"
  [moe_top2_cap1.25]=""
  [moe_top1_cap1.25]="model.moe.top_k=1"
  [moe_top2_cap1.0]="model.moe.capacity_factor=1.0"
  [moe_top2_dropless]="model.moe.capacity_factor=null model.moe.capacity_factor_eval=null"
  [moe_shared1_top1]="model.moe.num_shared=1 model.moe.top_k=1"
  [moe_top2_aux0]="model.moe.load_balance_weight=0"
)
ORDER=(dense_equal_active dense_equal_total moe_top2_cap1.25 moe_top1_cap1.25 moe_top2_cap1.0 moe_top2_dropless moe_shared1_top1 moe_top2_aux0)
for label in "${@:-${ORDER[@]}}"; do
  # shellcheck disable=SC2086
  $PY -m lab.train +experiment=moe_ablation name=moe_ablation/$label logger.wandb.mode=disabled callbacks.progress=null ${VARIANTS[$label]}
done
$PY -m lab.report "${LAB_RUNS_DIR:-runs}"/moe_ablation/*/* --out "${LAB_RUNS_DIR:-runs}/moe_ablation" --baseline moe_top2_cap1.25
