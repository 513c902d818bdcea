#!/usr/bin/env bash
# GPU figures on one H100 (issue 14 item 6 and the guide's list): gpt2_small_gpu bf16 tokens/s and MFU, eager,
# compiled and FSDP2 on one GPU; the MoE layer table and gpt_small vs gpt_small_moe in bf16, eager and compiled.
# Run from the repo root: bash experiments/gpu/bench.sh   (results: experiments/gpu/README.md)
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
RUNS=${LAB_RUNS_DIR:-runs}
steps=${STEPS:-200}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, lightning, torch.nn.functional as F; print('torch', torch.__version__, 'lightning', lightning.__version__, torch.cuda.get_device_name(), 'F.grouped_mm', hasattr(F, 'grouped_mm'))"
common="logger=csv callbacks.progress=null trainer.max_steps=$steps trainer.val_check_interval=$steps"
for variant in "eager" "compiled compile=true" "fsdp2 trainer=fsdp"; do
  set -- $variant
  name=$1; shift
  SECONDS=0
  timeout ${RUN_TIMEOUT:-200} $PY -m lab.train +experiment=gpt2_small_gpu name=gpu/gpt2_$name $common "$@" > /tmp/gpt2_$name.log 2>&1
  echo "gpt2_small_gpu $name: exit $? after ${SECONDS}s"; grep -E "error|Error" /tmp/gpt2_$name.log | tail -3
done
$PY experiments/gpu/summarize.py $RUNS/gpu/gpt2_*/*
timeout ${MOE_TIMEOUT:-300} $PY benchmarks/moe.py --device cuda --batch-scale 8 --reps 5 --rounds 3 --steps 10 --compile --no-seeds
