#!/usr/bin/env bash
# The GPU check: one call of at most 8 minutes on one CUDA GPU with no network (setup about 60 s, then step budgets
# of 390 s: about 450 s).
#   bash benchmarks/gpu_check.sh              on the GPU machine; logs in $OUT (default ./gpu_check_out)
#   DRY_RUN=1 bash benchmarks/gpu_check.sh    every step on the CPU at tiny sizes (CI: tests/benchmarks)
# Wheels: the GPU image's own torch is used (a CUDA torch cannot be carried); the pure-Python wheels of
# benchmarks/gpu_wheels.txt are installed from a carried folder .whl/ (`pip download --no-deps -d .whl -r
# benchmarks/gpu_wheels.txt` on a machine with network). Each step writes its full log to $OUT/<step>.log and one
# summary line (exit status, seconds, its last line) to $OUT/summary.txt: setup, parity, estimate, compile,
# crossover, fsdp (7 files with the summary).
#   (a) parity     CUDA against CPU for every architecture and head, tokens and continuous, padded, BatchNorm
#                  included: fp32 outputs, bf16 steps NaN-free, and no host-synchronising operator in a step
#   (b) estimate   six paper recipes: step time and peak memory against `spt-hf estimate` (bench_estimate.py)
#   (c) compile    bf16 torch.compile over 11 lengths padded to 64: graphs, graph breaks, step times
#   (d) crossover  NPLR's Cauchy sums against blocked powers on the device (`_CAUCHY_MAX_WORK`)
#   (e) fsdp       FSDP2 on one rank with a bf16 policy: SSM/EMA kernels equal the float32 ones
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
DRY_RUN=${DRY_RUN:-0}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_DISABLE_PROGRESS_BARS=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

# run_step NAME BUDGET_SECONDS COMMAND...: the full log in $OUT/NAME.log, one summary line with the exit status
run_step() {
  local name=$1 budget=$2 start rc
  shift 2
  [ "$DRY_RUN" = 1 ] && budget=300
  start=$(date +%s)
  timeout "$budget" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(( $(date +%s) - start ))s of ${budget}s: $(tail -n 1 "$OUT/$name.log" | cut -c1-200)" \
    | tee -a "$OUT/summary.txt"
  return $rc
}

setup() {
  if [ "$DRY_RUN" != 1 ] && [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
    echo "installing $(ls .whl/*.whl | wc -l) carried wheels (benchmarks/gpu_wheels.txt) into /tmp/gpu_site"
    $PY -m pip install --no-index --no-deps --target /tmp/gpu_site .whl/*.whl || return 1
    export PYTHONPATH=/tmp/gpu_site:$PWD/src
  else
    echo "no carried wheels in .whl/ (or a dry run): using the installed packages"
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
  fi
  $PY -c "import spt_hf" || { echo "import spt_hf failed: carry the wheels of benchmarks/gpu_wheels.txt in .whl/"; return 1; }
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'devices', torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', \
'transformers', transformers.__version__)" || return 1
}

# setup runs in this shell (its PYTHONPATH is the steps'); its log and summary line as run_step's
start=$(date +%s)
setup > "$OUT/setup.log" 2>&1
rc=$?
echo "setup rc=$rc $(( $(date +%s) - start ))s: $(tail -n 1 "$OUT/setup.log" | cut -c1-200)" | tee -a "$OUT/summary.txt"
[ $rc = 0 ] || { echo "setup failed: see $OUT/setup.log"; exit 1; }
if [ "$DRY_RUN" = 1 ]; then
  DRY=--dry_run
  ESTIMATE=(--device cpu --batch 2 --steps 1 --bf16 --recipes cpu/digits-s4-spt.yaml)
else
  DRY=
  ESTIMATE=(--device cuda --steps 2 --bf16 --peak_device H100 --recipes listops/s4-spt.yaml listops/mega-spt.yaml listops/transformer-spt.yaml
            image/dlr-spt.yaml image/spade-finetune.yaml listops/performer-spt.yaml)
fi

status=0
run_step parity 110 $PY benchmarks/gpu_steps.py parity $DRY || status=1
run_step estimate 130 $PY benchmarks/bench_estimate.py "${ESTIMATE[@]}" || status=1
run_step compile 80 $PY benchmarks/gpu_steps.py compile $DRY || status=1
run_step crossover 40 $PY benchmarks/gpu_steps.py crossover $DRY || status=1
run_step fsdp 30 $PY benchmarks/gpu_steps.py fsdp $DRY || status=1
echo "gpu_check done (status $status); logs in $OUT"
exit $status
