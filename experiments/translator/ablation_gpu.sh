#!/usr/bin/env bash
# The per-component ablation (experiments/translator/ablation.sh's variants, translator_small's budget: 2000 steps
# x 64 pairs, fp32) with many runs side by side on one GPU, one CPU thread each, seeds in waves (every variant's
# seed 1 first). Usage: MAX_JOBS=24 DEADLINE=540 bash experiments/translator/ablation_gpu.sh [variant ...]
set -u
PY=${PY:-python3}
RUNS=${LAB_RUNS_DIR:-runs}
export OMP_NUM_THREADS=1
declare -A ARGS=(
  [small]="+experiment=translator_small"
  [small+post]="+experiment=translator_small model.norm_placement=post"
  [small+sinusoidal]="+experiment=translator_small model.positions=sinusoidal"
  [small+relu]="+experiment=translator_small model.ffn=relu"
  [small+scaled_emb]="+experiment=translator_small model.scale_embeddings=true"
  [small+untied]="+experiment=translator_small model.tie_embeddings=false"
  [small+unshared]="+experiment=translator_small model.share_embeddings=false"
  [small+lr1e-3]="+experiment=translator_small task.optimizer.lr=1e-3"
  [small+lr4e-3]="+experiment=translator_small task.optimizer.lr=4e-3"
  [small+warmup500]="+experiment=translator_small task.scheduler.warmup_steps=500"
  [small+init_std0.05]="+experiment=translator_small model.init_std=0.05"
  [vanilla]="+experiment=translator_vanilla"
  [vanilla+pre]="+experiment=translator_vanilla model.norm_placement=pre"
  [vanilla+rotary]="+experiment=translator_vanilla model.positions=rotary"
  [vanilla+swiglu]="+experiment=translator_vanilla model.ffn=swiglu"
  [vanilla+unscaled_emb]="+experiment=translator_vanilla model.scale_embeddings=false"
  [vanilla+lr1e-3]="+experiment=translator_vanilla task.optimizer.lr=1e-3"
  [vanilla+lr4e-3]="+experiment=translator_vanilla task.optimizer.lr=4e-3"
  [vanilla+warmup500]="+experiment=translator_vanilla task.scheduler.warmup_steps=500"
)
ORDER=(small vanilla small+post small+sinusoidal small+relu small+scaled_emb small+lr1e-3 small+lr4e-3 vanilla+pre
       small+untied small+warmup500 small+init_std0.05 vanilla+rotary vanilla+swiglu vanilla+unscaled_emb vanilla+lr4e-3
       vanilla+lr1e-3 small+unshared vanilla+warmup500)
VARIANTS=("$@"); [ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=("${ORDER[@]}")
SECONDS=0
for seed in ${SEEDS:-1 2 3}; do
  for v in "${VARIANTS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${MAX_JOBS:-24}" ]; do sleep 1; done
    [ $SECONDS -lt $(( ${DEADLINE:-100000} - 150 )) ] || break 2   # a run takes ~2 min: start none that cannot end
    # shellcheck disable=SC2086
    $PY -m lab.train ${ARGS[$v]} trainer=gpu trainer.precision=32-true seed=$seed name="translator_ablation/$v/seed$seed" \
      logger=csv callbacks.progress=null > /dev/null 2>&1 &
    [ $SECONDS -gt 20 ] || sleep 20   # the first run prepares the data cache alone
  done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ] && [ $SECONDS -lt ${DEADLINE:-100000} ]; do sleep 2; done
echo "ablation: $(ls -d "$RUNS"/translator_ablation/*/seed*/*/ 2>/dev/null | wc -l) runs started, ${SECONDS}s"
