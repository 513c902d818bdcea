#!/usr/bin/env bash
# The MoE row with the recipe's optimizer (+task/optimizer=muon: Muon for the blocks' matrices, AdamW for the rest),
# moe_ablation's model (8 experts x 256, top-2, capacity 1.25, 300 steps), 3 seeds:
#   experts_muon    the experts' stacked matrices in Muon, each expert's matrix orthogonalised on its own (the default)
#   experts_adamw   the same run with task.optimizer.muon_experts=false: the experts' matrices in AdamW (task lr and
#                   weight decay), the router still in Muon
# Usage: bash experiments/moe_ablation/muon_experts.sh [seed ...]   (default 1 2 3); ends with lab.report.
#        VARIANTS=experts_muon bash experiments/moe_ablation/muon_experts.sh 2     (a subset)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${LAB_RUNS_DIR:-runs}
# one intra-op thread: on a shared, oversubscribed CPU, 2 OpenMP threads per process spin at every barrier
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A OVERRIDES=(
  [experts_muon]=""
  [experts_adamw]="task.optimizer.muon_experts=false"
)
read -r -a ORDER <<< "${VARIANTS:-experts_adamw experts_muon}"
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for seed in "${SEEDS[@]}"; do
  for label in "${ORDER[@]}"; do
    # shellcheck disable=SC2086
    $PY -m lab.train +experiment=moe_ablation +task/optimizer=muon seed=$seed name=moe_muon/$label/seed$seed \
      logger.wandb.mode=disabled callbacks.progress=null ${OVERRIDES[$label]}
  done
done
[ -n "${NO_REPORT:-}" ] || $PY -m lab.report "$RUNS"/moe_muon/experts_adamw/seed*/* "$RUNS"/moe_muon/experts_muon/seed*/* \
  --out "$RUNS/moe_muon" --metric val/loss
