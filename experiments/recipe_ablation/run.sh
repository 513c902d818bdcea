#!/usr/bin/env bash
# The recipe ablation: gpt_nano_char_fast (conf/experiment/gpt_nano_char_fast.yaml) with one change removed at a
# time (STUDY=remove, the default), or gpt_nano_char (the nanoGPT baseline) with one change added at a time
# (STUDY=add); every run sequential, seeds outermost so a partial study still has every variant once.
# Usage: bash experiments/recipe_ablation/run.sh [seed ...]          (default 1 2 3); ends with lab.report.
#        STUDY=add bash experiments/recipe_ablation/run.sh 1 2 3
#        VARIANTS="fast no_muon" bash experiments/recipe_ablation/run.sh 1    (a subset)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${LAB_RUNS_DIR:-runs}
STUDY=${STUDY:-remove}
# one intra-op thread: on a shared, oversubscribed CPU, 2 OpenMP threads per process spin at every barrier
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A REMOVE=(  # on +experiment=gpt_nano_char_fast
  [fast]=""
  [no_muon]="task.optimizer._target_=torch.optim.AdamW ~task.optimizer.muon_lr ~task.optimizer.momentum"
  [no_wsd]="task.scheduler._target_=lab.tasks.optim.warmup_cosine ~task.scheduler.decay_fraction"
  [no_rotary]="model.positions=learned"
  [no_qk_norm]="model.qk_norm=false"
  [no_relu_squared]="model.ffn=gelu"
  [no_untied_head]="model.tie_embeddings=true"
  [no_zero_init]="model.zero_init_proj=false"
  # the preset's layout before issue 31 made it exportable (Apertus): a soft-cap, LayerNorm with biases
  [with_softcap]="model.logit_softcap=30"
  [layernorm_bias]="model.norm=layernorm model.bias=true"
)
declare -A ADD=(  # on +experiment=gpt_nano_char
  [baseline]=""
  [add_muon]="+task/optimizer=muon"
  [add_wsd]="task.scheduler._target_=lab.tasks.optim.warmup_stable_decay +task.scheduler.decay_fraction=0.4"
  [add_rotary]="model.positions=rotary"
  [add_qk_norm]="model.qk_norm=true"
  [add_relu_squared]="model.ffn=relu_squared"
  [add_untied_head]="model.tie_embeddings=false"
  [add_zero_init]="model.zero_init_proj=true"
  [add_softcap]="model.logit_softcap=30"
)
if [ "$STUDY" = remove ]; then
  EXPERIMENT=gpt_nano_char_fast; BASE=fast
  DEFAULT="fast no_muon no_wsd no_rotary no_qk_norm no_relu_squared no_untied_head no_zero_init with_softcap layernorm_bias"
else
  EXPERIMENT=gpt_nano_char; BASE=baseline
  DEFAULT="baseline add_muon add_wsd add_rotary add_qk_norm add_relu_squared add_untied_head add_zero_init add_softcap"
fi
read -r -a ORDER <<< "${VARIANTS:-$DEFAULT}"
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for seed in "${SEEDS[@]}"; do
  for label in "${ORDER[@]}"; do
    if [ "$STUDY" = remove ]; then overrides=${REMOVE[$label]}; else overrides=${ADD[$label]}; fi
    # shellcheck disable=SC2086
    $PY -m lab.train +experiment=$EXPERIMENT seed=$seed name=recipe_$STUDY/$label/seed$seed \
      logger.wandb.mode=disabled callbacks.progress=null task.samples=null $overrides
  done
done
# the base variant's runs first: lab.report measures every other variant against the first
[ -n "${NO_REPORT:-}" ] || $PY -m lab.report "$RUNS"/recipe_$STUDY/$BASE/seed*/* \
  $(ls -d "$RUNS"/recipe_$STUDY/*/seed*/*/ | grep -v "/$BASE/") --out "$RUNS/recipe_$STUDY" --metric val/loss
