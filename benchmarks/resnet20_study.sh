#!/usr/bin/env bash
# The evaluator study behind the numbers in benchmarks/results/resnet20_cifar10/:
# converts the bundled ResNet-20, then runs every method at batch 64 (m = 0.1),
# the batch-1 momentum/variance grid, and the gate sweep, on the 15 corruptions
# at severity 5 of the CIFAR-10 test split in ../shared. About 1.5 h on 2 cores.
#
#   bash benchmarks/resnet20_study.sh [out_dir]   # default benchmarks/results/resnet20_cifar10
set -euo pipefail

OUT=${1:-benchmarks/results/resnet20_cifar10}
DATA=${DATA:-../shared/datasets/cifar10}
MODEL=models/resnet20_cifar10.keras
ART=runs/r20_forge.tflite
mkdir -p runs "$OUT"

if [[ ! -f $ART ]]; then
  forge_tflm convert --model=$MODEL --data_dir="$DATA" --output=$ART \
      --plain_output=runs/r20_int8.tflite
fi

common=(--artifact=$ART --data_dir="$DATA" --severity=5)

# 1. Every method, batch 64, m = 0.1, three orderings.
forge_tflm eval "${common[@]}" --keras_model=$MODEL \
    --methods=source,forge,forge-gated,scale-adapt,source-fp32,bn-adapt,tent \
    --batch_size=64 --momentum=0.1 --orderings=3 --output_dir="$OUT/main_bs64"
forge_tflm eval "${common[@]}" --methods=forge --variance=batch \
    --batch_size=64 --momentum=0.1 --orderings=3 --output_dir="$OUT/bs64_variance_batch"

# 2. Batch size 1: window-matched (m = 1/640) vs fixed m = 0.1, per variance estimator.
for variance in running batch; do
  forge_tflm eval "${common[@]}" --methods=forge --variance=$variance --batch_size=1 \
      --window=640 --output_dir="$OUT/bs1_window640_$variance"
  forge_tflm eval "${common[@]}" --methods=forge --variance=$variance --batch_size=1 \
      --momentum=0.1 --output_dir="$OUT/bs1_momentum0.1_$variance"
done

# 3. The gate: probe length (batches) x margin, batch 64.
for warmup in 3 5 10; do
  for delta in 0 0.01 0.02; do
    forge_tflm eval "${common[@]}" --methods=forge-gated --batch_size=64 --momentum=0.1 \
        --gate_warmup=$warmup --gate_delta=$delta \
        --output_dir="$OUT/gate_w${warmup}_d${delta}"
  done
done
