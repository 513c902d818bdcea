#!/usr/bin/env bash
# The learning-rate transfer study (docs/mup.md, this folder's README): gpt_nano_char-shaped models (2 layers,
# context 64, 100 steps) at widths 64-512 x 7 lrs (factors of 2) x 2 seeds, sp and mup (base width 64), one
# Hydra multirun; the seeds vary slowest so that a partial run holds whole seeds. Then the figure and table.
#   experiments/mup_transfer/run.sh [OUT_DIR] [extra overrides...]                  AdamW, its lr swept
#   OPTIMIZER=muon experiments/mup_transfer/run.sh [OUT_DIR] [extra overrides...]   the fast recipe
#     (gpt_nano_char_fast: MuonAdamW), Muon's lr swept, AdamW's (embeddings, head, vectors) at the recipe's
# A part of the grid: SEEDS, WIDTHS, PARAMETRIZATIONS or LRS (comma lists), e.g. SEEDS=1 WIDTHS=512; not as extra
# overrides of the same keys (the sweep's journal would count the jobs of both lists).
set -euo pipefail
OPTIMIZER=${OPTIMIZER:-adamw}
case "$OPTIMIZER" in
  adamw) EXPERIMENT=gpt_nano_char LR_KEY=task.optimizer.lr
         LRS=${LRS:-0.000244140625,0.00048828125,0.0009765625,0.001953125,0.00390625,0.0078125,0.015625} ;;
  muon) EXPERIMENT=gpt_nano_char_fast LR_KEY=task.optimizer.muon_lr
        LRS=${LRS:-0.00390625,0.0078125,0.015625,0.03125,0.0625,0.125,0.25} ;;
  *) echo "error: OPTIMIZER=$OPTIMIZER: give adamw or muon" >&2; exit 2 ;;
esac
OUT=${1:-runs/mup_transfer/$OPTIMIZER}
shift || true
python -m lab.train -m +experiment="$EXPERIMENT" name="mup_transfer_$OPTIMIZER" seed="${SEEDS:-0,1}" \
  model.d_model="${WIDTHS:-64,128,256,512}" model.parametrization="${PARAMETRIZATIONS:-sp,mup}" "$LR_KEY=$LRS" \
  model.n_layers=2 model.mup_base_width=64 trainer.max_steps=100 trainer.val_check_interval=100 \
  task.scheduler.warmup_steps=10 task.scheduler.min_lr=0 trainer.gradient_clip_val=null data.eval_batches=20 \
  test=false task.samples=null callbacks.checkpoint=null callbacks.progress=null logger.wandb.mode=disabled \
  hydra.sweep.dir="$OUT" "$@"
python -m lab.report "${OUT:-runs/mup_transfer/adamw}" --transfer
