#!/usr/bin/env bash
# Issue 32 item 4 and the guide's GPU list on one H100: gpt2_small_gpu vs gpt2_small_fast_gpu (the speedrun
# recipe, compiled) tokens/s and MFU, each change on its own; FSDP2 on one GPU (with validation's cached decoding);
# MoE at GPT-2 scale vs its dense twin. Short runs: STEPS training steps (default 100: the first 10-step window
# holds compilation, the median of the other windows is reported), a few validation and test batches.
#   bash experiments/gpu/bench_fast.sh [dense|loop|moe|all]        (results: experiments/gpu/README.md)
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
RUNS=${LAB_RUNS_DIR:-runs}
steps=${STEPS:-100}
part=${1:-all}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
common="logger=csv callbacks.progress=null trainer.max_steps=$steps trainer.val_check_interval=$steps
 +trainer.limit_val_batches=4 +trainer.limit_test_batches=4 task.samples.max_new_tokens=32 ${EXTRA:-}"
adamw="task.optimizer._target_=torch.optim.AdamW ~task.optimizer.muon_lr ~task.optimizer.momentum"
run() {  # name, overrides...
  local name=$1; shift
  SECONDS=0
  timeout -k 10 ${RUN_TIMEOUT:-240} $PY -m lab.train name=gpu/$name $common "$@" > /tmp/$name.log 2>&1
  echo "$name: exit $? after ${SECONDS}s"; grep -E "^error|Error|nan" /tmp/$name.log | tail -3
}
if [[ $part == dense || $part == all ]]; then
  run base_eager +experiment=gpt2_small_gpu
  run base_compiled +experiment=gpt2_small_gpu compile=true
  run fast_compiled +experiment=gpt2_small_fast_gpu
  run fast_compiled_b64 +experiment=gpt2_small_fast_gpu data.batch_size=64
  run base_fsdp2 +experiment=gpt2_small_gpu trainer=fsdp
fi
if [[ $part == loop || $part == all ]]; then  # the plain-loop reference (benchmarks/train_step.py)
  B="timeout -k 5 ${RUN_TIMEOUT:-240} $PY benchmarks/train_step.py"
  $B +experiment=gpt2_small_fast_gpu --variants adamw,loss_compiled,model_compiled --profile
  $B +experiment=gpt2_small_gpu compile=true +task.optimizer.fused=true --variants model_compiled,loss_compiled
fi
if [[ $part == moe || $part == all ]]; then  # plain loop, eager and compiled, MoE vs its dense twin
  B="timeout -k 5 ${RUN_TIMEOUT:-240} $PY benchmarks/train_step.py"
  for variant in base model_compiled; do  # eager (compile is false in the preset), then the model compiled
    $B +experiment=gpt2_small_moe_gpu model.moe=null model.d_ff=2048 --variants $variant
    $B +experiment=gpt2_small_moe_gpu --variants $variant
  done
fi
$PY experiments/gpu/summarize.py $RUNS/gpu/*/*
