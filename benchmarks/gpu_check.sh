#!/usr/bin/env bash
# GPU check for a machine with CUDA GPUs, under 10 minutes (the steps' time limits add up to 570 s): installs spt_hf
# (from local wheels in .whl/ when the network is closed), then on CUDA runs the layer and model benchmarks in fp32
# and bf16 autocast at LRA shapes, checks that bf16 training losses stay finite, compares the dry run's estimate
# (spt-hf estimate) with real full-size steps of one paper recipe per architecture, times compiled against eager
# training of two paper recipes, and runs one DDP and one FSDP step (one process per GPU, or one process on a single
# GPU). Everything it prints also goes to $OUT (or ./gpu_check_out).
#   bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

PY=python3
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
else
  $PY -m pip install -q -e . 2>/dev/null || export PYTHONPATH=src
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'); \
print('transformers', transformers.__version__)" || exit 1
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
[ "$NGPU" -ge 1 ] || { echo "no CUDA GPU: nothing to check"; exit 1; }

echo "== bf16 training stays finite (200 steps, every architecture and backbone of bench_models.py) =="
timeout 60 $PY benchmarks/bf16_check.py --device cuda --steps 200 2>&1 | tail -17

# Memory probes start one process each (CUDA start-up included): only for the fp32 model rows.
for dtype in fp32 bf16; do
  echo "== layers, $dtype =="
  timeout 50 $PY benchmarks/bench_layers.py --device cuda --dtype $dtype --d 128 256 --L 1024 4096 16384 \
    --steps 3 --no_memory 2>&1 | tail -16
  echo "== models, $dtype =="
  memory=$([ "$dtype" = bf16 ] && echo --no_memory)
  timeout 60 $PY benchmarks/bench_models.py --device cuda --dtype $dtype --d 128 --lengths 1024 4096 16384 \
    --layers 2 --window 512 1024 --repeats 3 $memory 2>&1 | tail -12
done

echo "== the dry run's estimate against real steps (one recipe per architecture, full size and length) =="
# Estimate measured on this GPU at full length, then two real steps at the recipe's per-device batch (or the largest
# that the estimate says fits); memory ratio = peak CUDA allocation / estimate, FLOPs ratio = counted / estimate.
timeout 150 $PY benchmarks/bench_estimate.py --steps 2 2>&1 | tail -14

echo "== torch.compile against eager, paper size (on 2 CPU cores: MEGA 1.6x, S4 1.2x, the Transformer 1.05x) =="
# The paper recipes leave torch_compile off until this says whether it pays on a GPU; compilation included.
timeout 60 $PY benchmarks/bench_compile.py --device cuda --recipes listops/mega-spt.yaml listops/s4-spt.yaml \
  --batch 16 --steps 8 2>&1 | tail -5

echo "== one DDP step and one FSDP2 step vs one process =="
NPROC=$(( NGPU >= 2 ? 2 : 1 ))
for mode in ddp fsdp; do
  timeout 40 $PY -m accelerate.commands.launch --num_processes $NPROC --num_machines 1 --mixed_precision no \
    --dynamo_backend no $([ "$NPROC" -ge 2 ] && echo --multi_gpu) tests/distributed/ddp_step.py "$OUT/$mode.pt" $mode \
    && echo "$mode step ran on $NPROC process(es)"
done
echo "done; log in $OUT/gpu_check.log"
