"""Sweep the gate's probe length W and margin delta from one pass.

Runs each stream once with both paths on every batch (frozen FORGE = source,
adapting FORGE), keeping per-batch correct counts and the gate's probe sums
(gate.ProbeStats: confidences and softmax vectors, summed over the batch).
The gate's outcome for any (W, delta) follows exactly from those records: the
adapting path's state does not depend on the gate while it probes, the gate
predicts with the frozen path during the probe, and afterwards it is either the
ungated adapting path or the source. So one pass prices the whole grid; the
chosen setting is then checked with `forge_tflm eval --methods=forge-gated`.
Every gate signal is priced from the same records (confidence_drop takes its
reference from the clean stream's source confidence), and `--records` reprices
a pass saved with `--save_records` without running the model again (the records
are per batch, a few MB: keep them out of committed results).

    python benchmarks/gate_sweep.py --artifact=runs/r20_forge.tflite \
        --data_dir=../shared/datasets/cifar10 --momentum=0.1 \
        --save_records=runs/gate_records.json --output=gate_sweep.json
    python benchmarks/gate_sweep.py --records=runs/gate_records.json \
        --signal=confidence_drop --deltas=0.02,0.03,0.04,0.05,0.06
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

from forge_tflm.corruptions import CORRUPTIONS
from forge_tflm.data import load_dataset
from forge_tflm.evaluation import streams as st
from forge_tflm.evaluation.gate import (CONFIDENCE_DROP, SIGNALS, GateConfig, ProbeStats,
                                      gate_fires)
from forge_tflm.evaluation.int8_methods import override_options
from forge_tflm.evaluation.protocol import ordering
from forge_tflm.artifact import Artifact
from forge_tflm.runtime.segmented import ADAPT, FROZEN, SegmentedModel


def record_stream(model: SegmentedModel, source: SegmentedModel, x_int8, labels, order,
                  batch):
  """Per batch: [correct source, correct adapting] + ProbeStats.to_row().

  `source` is never adapted, so its frozen pass is the artifact at its clean targets.
  """
  model.reset()
  rows = []
  for start in range(0, len(order), batch):
    idx = order[start:start + batch]
    frozen = source.dequantize_output(source.run(x_int8[idx], mode=FROZEN))
    adapted = model.dequantize_output(model.run(x_int8[idx], mode=ADAPT))
    y = labels[idx]
    rows.append(np.concatenate([[(frozen.argmax(1) == y).sum(), (adapted.argmax(1) == y).sum()],
                                ProbeStats.of_batch(frozen, adapted).to_row()]))
  return np.array(rows)


# Columns of a record row before the ProbeStats row: correct counts per path.
SOURCE, ADAPTING = 0, 1


def stream_accuracy(rows: np.ndarray, path: int) -> float:
  """Whole-stream accuracy of one path (SOURCE or ADAPTING) from its records."""
  return float(rows[:, path].sum() / probe_of(rows).images)


def probe_of(rows: np.ndarray, batches: int | None = None) -> ProbeStats:
  """The probe sums over the first `batches` recorded batches (all by default)."""
  return ProbeStats.from_row(rows[:batches, 2:].sum(axis=0))


def gated_accuracy(rows: np.ndarray, gate: GateConfig) -> tuple[float, bool]:
  """The accuracy GatedForge gets on the recorded stream, and whether it fired."""
  correct_source, correct_adapted = rows[:, SOURCE], rows[:, ADAPTING]
  warmup = gate.warmup_batches
  fired = gate_fires(probe_of(rows, warmup), gate)
  correct = correct_source[:warmup].sum() + (correct_adapted if fired
                                             else correct_source)[warmup:].sum()
  return float(correct / probe_of(rows).images), fired


def run_records(args) -> dict[str, list[np.ndarray]]:
  artifact = Artifact.load(args.artifact)
  model = SegmentedModel.from_artifact(artifact, args.kernels)
  source = SegmentedModel.from_artifact(artifact, args.kernels)
  override_options(model, momentum=args.momentum, window=args.window)
  contract = artifact.input_contract
  clean = load_dataset(args.dataset, "test", args.data_dir)
  records = {}
  for stream in st.generated_streams(clean, list(CORRUPTIONS), args.severity,
                                     include_clean=True):
    x = model.quantize_input(contract.to_float(stream.images))
    records[stream.name] = [
        record_stream(model, source, x, stream.labels, ordering(len(x), k, 0),
                      args.batch_size)
        for k in range(args.orderings)]
    r = records[stream.name][0]
    print(f"{stream.name:18s} source {100 * stream_accuracy(r, SOURCE):5.1f}"
          f"  forge {100 * stream_accuracy(r, ADAPTING):5.1f}", flush=True)
  return records


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--artifact")
  p.add_argument("--data_dir")
  p.add_argument("--records", help="reprice the records of a --save_records file"
                 " instead of running the model")
  p.add_argument("--save_records", help="JSON for the per-batch records of this pass")
  p.add_argument("--signal", choices=SIGNALS, default=SIGNALS[0])
  p.add_argument("--dataset", default="cifar10")
  p.add_argument("--severity", type=int, default=5)
  p.add_argument("--batch_size", type=int, default=64)
  p.add_argument("--momentum", type=float)
  p.add_argument("--window", type=int)
  p.add_argument("--warmups", default="2,3,5,10")
  p.add_argument("--deltas", default="-0.03,-0.02,-0.01,0,0.01")
  p.add_argument("--orderings", type=int, default=1)
  p.add_argument("--kernels", default="optimized")
  p.add_argument("--output", help="JSON with the grid (per-stream outcomes)")
  args = p.parse_args()
  if args.records:
    with open(args.records) as f:
      records = {k: [np.array(r) for r in v] for k, v in json.load(f).items()}
  elif args.artifact and args.data_dir:
    records = run_records(args)
  else:
    p.error("give --artifact and --data_dir, or --records")
  # The clean stream's source confidence (every ordering sees the same images).
  clean = probe_of(records["clean"][0])
  reference = clean.confidence_source / clean.images
  print(f"signal {args.signal}" + (f", clean reference {reference:.4f}"
                                   if args.signal == CONFIDENCE_DROP else ""))
  grid = []
  warmups = [int(w) for w in args.warmups.split(",")]
  deltas = [float(d) for d in args.deltas.split(",")]
  for warmup, delta in itertools.product(warmups, deltas):
    per_stream = {}
    for name, runs in records.items():
      gate = GateConfig(warmup, delta, args.signal,
                        reference if args.signal == CONFIDENCE_DROP else None)
      outcomes = [gated_accuracy(r, gate) for r in runs]
      source = np.mean([stream_accuracy(r, SOURCE) for r in runs])
      ungated = np.mean([stream_accuracy(r, ADAPTING) for r in runs])
      per_stream[name] = {"gated": float(np.mean([a for a, _ in outcomes])),
                          "source": float(source), "ungated": float(ungated),
                          "fired": [f for _, f in outcomes]}
    corrupted = [v for k, v in per_stream.items() if k != "clean"]
    grid.append({
        "warmup": warmup, "delta": delta,
        "mean_recovery_gated": 100 * float(np.mean([v["gated"] - v["source"]
                                                    for v in corrupted])),
        "mean_recovery_ungated": 100 * float(np.mean([v["ungated"] - v["source"]
                                                      for v in corrupted])),
        "worst_vs_source": 100 * float(min(v["gated"] - v["source"] for v in corrupted)),
        "clean_vs_source": 100 * (per_stream["clean"]["gated"] -
                                  per_stream["clean"]["source"]),
        "fired": {k: v["fired"] for k, v in per_stream.items()},
        "streams": per_stream})

  print("\n| W | delta | recovery gated | ungated | worst corruption vs source |"
        " clean vs source | streams fired |")
  print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
  for g in grid:
    fired = [k for k, v in g["fired"].items() if any(v)]
    print(f"| {g['warmup']} | {g['delta']:+.2f} | {g['mean_recovery_gated']:+.2f} |"
          f" {g['mean_recovery_ungated']:+.2f} | {g['worst_vs_source']:+.2f} |"
          f" {g['clean_vs_source']:+.2f} | {len(fired)}/{len(g['fired'])}"
          f"{'' if 'clean' in fired else ' (not clean)'} |")
  if args.save_records:
    with open(args.save_records, "w") as f:
      json.dump({k: [r.tolist() for r in v] for k, v in records.items()}, f)
  if args.output:
    with open(args.output, "w") as f:
      json.dump({"args": vars(args), "reference": reference, "grid": grid}, f, indent=1)


if __name__ == "__main__":
  main()
