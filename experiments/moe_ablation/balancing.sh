#!/usr/bin/env bash
# Load balancing at moe_ablation's budget (8 experts x 256, top-2, capacity 1.25, 300 steps), 3 seeds:
#   aux_loss      the baseline: load-balance loss 0.01 (Switch / GShard)
#   aux_free      no balance loss; a per-expert bias on the routing scores for selection only, updated from the
#                 load every step (DeepSeek-V3, rate 0.001)
#   aux_free_sigmoid   the same with sigmoid gates (DeepSeek-V3's router)
#   none          neither (the control: how unbalanced routing gets on its own)
# Usage: bash experiments/moe_ablation/balancing.sh [seed ...]   (default 1 2 3); ends with lab.report.
#        VARIANTS="aux_loss aux_free" bash experiments/moe_ablation/balancing.sh 2 3     (a subset)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${LAB_RUNS_DIR:-runs}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A OVERRIDES=(  # not VARIANTS: that name is the environment variable that picks a subset
  [aux_loss]=""
  [aux_free]="model.moe.load_balance_weight=0 model.moe.bias_update_rate=0.001"
  [aux_free_sigmoid]="model.moe.load_balance_weight=0 model.moe.bias_update_rate=0.001 model.moe.gate=sigmoid"
  [none]="model.moe.load_balance_weight=0"
)
# measured with moe_ablation's GPT-2 layout of before (gelu experts, biases, eval capacity 2.0); pinned here so these
# commands still give that model now that moe_ablation has Mixtral's layout (experiments/moe_ablation/README.md)
GPT2_LAYOUT="model.positions=learned model.norm=layernorm model.ffn=gelu model.bias=true model.moe.capacity_factor_eval=2.0"
read -r -a ORDER <<< "${VARIANTS:-aux_loss aux_free aux_free_sigmoid none}"
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for seed in "${SEEDS[@]}"; do
  for label in "${ORDER[@]}"; do
    # shellcheck disable=SC2086
    $PY -m lab.train +experiment=moe_ablation seed=$seed name=moe_balancing/$label/seed$seed \
      logger.wandb.mode=disabled callbacks.progress=null $GPT2_LAYOUT ${OVERRIDES[$label]}
  done
done
[ -n "${NO_REPORT:-}" ] || $PY -m lab.report "$RUNS"/moe_balancing/aux_loss/seed*/* $(ls -d "$RUNS"/moe_balancing/*/seed*/*/ | grep -v /aux_loss/) \
  --out "$RUNS/moe_balancing" --metric val/loss
