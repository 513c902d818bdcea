#!/usr/bin/env bash
# The learning-rate transfer study (docs/mup.md, this folder's README): gpt_nano_char-shaped models (2 layers,
# context 64, 100 steps) at widths 64-512 x 7 Adam lrs (factors of 2) x 2 seeds, sp and mup (base width 64), one
# Hydra multirun; the seeds vary slowest so that a partial run holds whole seeds. Then the figure and table.
#   experiments/mup_transfer/run.sh [OUT_DIR] [extra overrides...]
set -euo pipefail
OUT=${1:-runs/mup_transfer/adamw}
shift || true
python -m lab.train -m +experiment=gpt_nano_char name=mup_transfer \
  seed=0,1 model.d_model=64,128,256,512 model.parametrization=sp,mup \
  task.optimizer.lr=0.000244140625,0.00048828125,0.0009765625,0.001953125,0.00390625,0.0078125,0.015625 \
  model.n_layers=2 model.mup_base_width=64 trainer.max_steps=100 trainer.val_check_interval=100 \
  task.scheduler.warmup_steps=10 task.scheduler.min_lr=0 trainer.gradient_clip_val=null data.eval_batches=20 \
  test=false task.samples=null callbacks.checkpoint=null callbacks.progress=null logger.wandb.mode=disabled \
  hydra.sweep.dir="$OUT" "$@"
python -m lab.report "${OUT:-runs/mup_transfer/adamw}" --transfer
