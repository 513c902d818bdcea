#!/usr/bin/env bash
# The scaling ladder study (experiments/scaling_ladder/README.md): conf/ladder/cpu.yaml's five rungs x three
# variants (the gpt_nano_char baseline, the speedrun recipe, a top-1 MoE of 4 experts with the dense model's
# active parameters) x seeds 1,2,3, then lab.report's scaling view over all of them.
# Two lanes in parallel (both cores): lane A the largest rung, lane B the four smaller; in each lane one Hydra
# multirun per variant, under /usr/bin/time -v (time_A.txt, time_B.txt: the CPU time).
# Usage: bash experiments/scaling_ladder/run.sh [runs dir] [tokens per parameter]   (default /tmp/ladder_runs 3)
# Then report.md, scaling.png here and held_out.py's table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
RUNS=${1:-/tmp/ladder_runs}
K=${2:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
declare -A VARIANT=(
  [baseline]="name=ladder_baseline"
  [fast]="name=ladder_fast +recipe=speedrun"
  [moe]="name=ladder_moe +model.moe={num_experts:4,top_k:1}"
)
lane() {  # lane <name> <rungs>
  for v in baseline fast moe; do
    # shellcheck disable=SC2086  # the variant's overrides are words
    nice -n 19 $PY -m lab.train -m +experiment=gpt_nano_char +ladder=cpu "ladder.rung=$2" "ladder.tokens_per_param=$K" \
      seed=1,2,3 ${VARIANT[$v]} test=false logger.wandb.mode=disabled callbacks.progress=null \
      "hydra.sweep.dir=$RUNS/$v/$1"
  done
}
mkdir -p "$RUNS"
export PY K RUNS
/usr/bin/time -v -o "$RUNS/time_A.txt" bash -c "$(declare -p VARIANT); $(declare -f lane); lane A r5" > "$RUNS/lane_A.log" 2>&1 &
/usr/bin/time -v -o "$RUNS/time_B.txt" bash -c "$(declare -p VARIANT); $(declare -f lane); lane B r1,r2,r3,r4" > "$RUNS/lane_B.log" 2>&1 &
wait
# the report (report.html with plotly.js inlined stays with the runs; report.md and the chart come here)
$PY -m lab.report "$RUNS" --budget finished --out "$RUNS/report" --wandb off
cp "$RUNS/report/report.md" experiments/scaling_ladder/report.md
$PY experiments/scaling_ladder/figure.py "$RUNS" "$RUNS/report/scaling.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,560 \
  --screenshot=experiments/scaling_ladder/scaling.png "$RUNS/report/scaling.html"
$PY experiments/scaling_ladder/held_out.py "$RUNS"
