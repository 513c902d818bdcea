#!/usr/bin/env bash
# The per-component ablation (experiments/translator/ablation.sh's variants, translator_small's budget: 2000 steps
# x 64 pairs, fp32) with many runs side by side on one GPU, one CPU thread each, seeds in waves (every variant's
# seed 1 first). Usage: MAX_JOBS=24 DEADLINE=540 bash experiments/translator/ablation_gpu.sh [variant ...]
set -u
PY=${PY:-python3}
RUNS=${LAB_RUNS_DIR:-runs}
export OMP_NUM_THREADS=1
source "$(dirname "$0")/variants.sh"
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
