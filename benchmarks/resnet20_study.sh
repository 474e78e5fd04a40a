#!/usr/bin/env bash
# The converter and evaluator study behind benchmarks/results/resnet20_cifar10/:
# converts the bundled ResNet-20, checks frozen FORGE against the plain int8
# model, runs every method at batch 64 (m = 0.1, three orderings), the batch-1
# momentum/variance grid, the gate sweep and the overhead benchmark, on the 15
# corruptions at severity 5 of the CIFAR-10 test split in ../shared.
# About an hour on 2 cores.
#
#   bash benchmarks/resnet20_study.sh [out_dir]   # default benchmarks/results/resnet20_cifar10
set -euo pipefail

OUT=${1:-benchmarks/results/resnet20_cifar10}
DATA=${DATA:-../shared/datasets/cifar10}
MODEL=models/resnet20_cifar10.keras
ART=runs/r20_forge.tflite
PLAIN=runs/r20_int8.tflite
mkdir -p runs "$OUT"

/usr/bin/time -f "convert: %e s wall" forge_tflm convert --model=$MODEL --data_dir="$DATA" \
    --output=$ART --plain_output=$PLAIN 2>&1 | tail -2 | tee "$OUT/convert.txt"
python benchmarks/frozen_agreement.py --artifact=$ART --plain=$PLAIN --keras_model=$MODEL \
    --data_dir="$DATA" --kernels=reference > "$OUT/frozen_agreement.json"

common=(--artifact=$ART --data_dir="$DATA" --severity=5)

# Gate: price the (W, delta) grid from one two-path pass (clean stream included),
# for the default signal and, from the same records, the two confidence signals.
python benchmarks/gate_sweep.py --artifact=$ART --data_dir="$DATA" --momentum=0.1 \
    --orderings=3 --warmups=2,3,4,5,10,20 --deltas=0.01,0.02,0.03,0.04,0.06,0.1 \
    --save_records=runs/r20_gate_records.json --output="$OUT/gate_sweep.json" \
    > "$OUT/gate_sweep.md"
python benchmarks/gate_sweep.py --records=runs/r20_gate_records.json --signal=confidence_gain \
    --warmups=2,3,5,10,20 --deltas=-0.01,0,0.01,0.02,0.03 > "$OUT/gate_sweep_gain.md"
python benchmarks/gate_sweep.py --records=runs/r20_gate_records.json --signal=confidence_drop \
    --warmups=2,3,5,10,20 --deltas=0.02,0.03,0.04,0.05,0.06 > "$OUT/gate_sweep_drop.md"

# Every method, batch 64, m = 0.1, three orderings (forge-gated: the default gate).
forge_tflm eval "${common[@]}" --keras_model=$MODEL --include_clean \
    --methods=source,forge,forge-gated,scale-adapt,source-fp32,bn-adapt,tent \
    --batch_size=64 --momentum=0.1 --orderings=3 --output_dir="$OUT/main_bs64"

# The gate with the other two signals at their defaults, three orderings.
for signal in confidence_gain confidence_drop; do
  forge_tflm eval "${common[@]}" --methods=source,forge,forge-gated --include_clean \
      --gate_signal=$signal --batch_size=64 --momentum=0.1 --orderings=3 \
      --output_dir="$OUT/gate_${signal#confidence_}_bs64"
done
# The default gate at batch 1 (window-matched momentum): same probe in images.
forge_tflm eval "${common[@]}" --methods=source,forge,forge-gated --include_clean \
    --batch_size=1 --window=640 --output_dir="$OUT/gate_default_bs1"

# Batch 1 vs 64 per variance estimator: window-matched (m = 1/640) vs fixed m = 0.1.
for variance in running batch; do
  forge_tflm eval "${common[@]}" --methods=forge --variance=$variance --batch_size=64 \
      --momentum=0.1 --output_dir="$OUT/bs64_m0.1_$variance"
  forge_tflm eval "${common[@]}" --methods=forge --variance=$variance --batch_size=1 \
      --window=640 --output_dir="$OUT/bs1_window640_$variance"
  forge_tflm eval "${common[@]}" --methods=forge --variance=$variance --batch_size=1 \
      --momentum=0.1 --output_dir="$OUT/bs1_m0.1_$variance"
done

# Wall time of FORGE evaluation / plain int8 inference, and one full pass.
python benchmarks/bench_eval_overhead.py --artifact=$ART --plain=$PLAIN --data_dir="$DATA" \
    --full_pass | tee "$OUT/bench_eval_overhead.txt"
