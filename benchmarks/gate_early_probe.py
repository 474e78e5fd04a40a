"""Where the gate's early "on" decision may come (gate.py DEFAULT_EARLY_IMAGES).

At batch 1 the gate's first probe predicts with the source for 256 images, which costs
recovery on every stream adapting helps. This runs the first probe of every stream
(the real GatedForge at batch 1, early decisions off, so the probe runs to its end) for
each label order, keeps per image the running diversity score and whether each path was
right, and prices an early rule (from M probed images on, "on" at the first image whose
running score exceeds D) from those records: the probes it turns "on" that the whole
probe turned "off" (flips: the rule would change a decision, not only its timing), and
on shuffled streams the accuracy it adds over the probe's remaining images (points of
the whole stream, mean over corruptions). What happens after the probe does not depend
on the rule unless it flips a decision.

    python benchmarks/gate_early_probe.py --artifact=runs/r20_guard.tflite \\
        --data_dir=../shared/datasets/cifar10 --output=benchmarks/results/gate_early_probe.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time

import numpy as np

from forge_tflm.artifact import Artifact
from forge_tflm.corruptions import CORRUPTIONS
from forge_tflm.data import load_dataset
from forge_tflm.evaluation import field_streams
from forge_tflm.evaluation import streams as st
from forge_tflm.evaluation.gate import GateConfig, GatedForge
from forge_tflm.runtime.segmented import ADAPT, SOURCE, SegmentedModel

LABEL_ORDERS = (("shuffled", None), ("dirichlet", 0.1), ("dirichlet", 0.01), ("sorted", None))


@dataclasses.dataclass
class Probe:
  stream: str
  order: str
  ordering: int
  fired: bool          # The whole probe's decision.
  scores: np.ndarray   # Running score after each probed image.
  vetoed: np.ndarray   # Per image: the running autocorrelation vetoes (label-blind models).
  gain: np.ndarray     # Per image: adapting right minus source right.
  images: int          # Images in the whole stream.


class _RecordingGate(GatedForge):
  """The gate, remembering the latest output of each path it ran."""

  def logits(self, x_int8, mode):
    out = super().logits(x_int8, mode)
    self.last[mode] = out
    return out


def first_probe(model: SegmentedModel, config: GateConfig, x_int8, labels, order):
  """The first probe of a stream at batch 1, image by image:
  (fired, scores, vetoed, gain)."""
  gated = _RecordingGate(model, dataclasses.replace(config, early_images=0), batch_size=1)
  gated.last = {}
  veto = gated.config.early_max_autocorrelation
  scores, vetoed, gain = [], [], []
  for i in order[:gated.warmup_batches]:
    gated.predict(x_int8[i:i + 1])
    scores.append(gated.probe.score(gated.config))
    vetoed.append(not gated.serial.autocorrelation() <= veto)  # As gate.fires_early.
    right = [int(gated.last[m][0].argmax() == labels[i]) for m in (SOURCE, ADAPT)]
    gain.append(right[1] - right[0])
  return bool(gated.fired), np.array(scores), np.array(vetoed), np.array(gain)


def price(probes: list[Probe], images: int, delta: float):
  """(flips, shuffled probes decided early, mean points added on shuffled streams)."""
  flips = early = 0
  added: dict[str, list[float]] = {}
  for p in probes:
    # Images probed when it decides; the whole probe's last image decides anyway.
    at = next((n for n in range(images, len(p.scores))
               if p.scores[n - 1] > delta and not p.vetoed[n - 1]), None)
    if at is not None:
      flips += not p.fired
    if p.order == "shuffled":
      early += at is not None
      points = 100.0 * p.gain[at:].sum() / p.images if at is not None else 0.0
      added.setdefault(p.stream, []).append(points)
  mean = float(np.mean([np.mean(v) for v in added.values()])) if added else 0.0
  return flips, early, mean


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--artifact", required=True)
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--severity", type=int, default=5)
  ap.add_argument("--orderings", type=int, default=3)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--corruptions", default=",".join(CORRUPTIONS))
  ap.add_argument("--early_images", default="64,96,128,160")
  ap.add_argument("--early_deltas", default="0.08,0.1,0.12,0.15")
  ap.add_argument("--output", required=True)
  args = ap.parse_args(argv)
  t0 = time.time()
  artifact = Artifact.load(args.artifact)
  model = SegmentedModel.from_artifact(artifact, "optimized")
  config = GateConfig()
  clean = load_dataset("cifar10", "test", args.data_dir)
  corruptions = args.corruptions.split(",")
  base = list(st.generated_streams(clean, corruptions, args.severity, args.seed))
  probes: list[Probe] = []
  for kind, alpha in LABEL_ORDERS:
    order_spec = field_streams.LabelOrder(kind, alpha, 1)
    for stream in field_streams.build("reset_each_shift", base, order_spec):
      x = model.quantize_input(artifact.input_contract.to_float(stream.images))
      for k in range(args.orderings):
        order = stream.order(k, args.seed)
        fired, scores, vetoed, gain = first_probe(model, config, x, stream.labels, order)
        probes.append(Probe(stream.name, order_spec.spec, k, fired, scores, vetoed, gain,
                            len(order)))
      print(f"{order_spec.spec} {stream.name}: {time.time() - t0:.0f} s", file=sys.stderr)
  lines = [f"# {datetime.date.today()}: python benchmarks/gate_early_probe.py"
           f" {' '.join(sys.argv[1:] if argv is None else argv)}",
           f"# The gate's first probe ({config.batches(1)} images, batch 1, margin"
           f" {config.margin}; "
           + ("class-balanced model: the whole probe's veto only where adapting "
              "conceals the correlation, "
              if model.class_balanced else "label-blind model: ")
           + f"the early decision's veto at {config.early_max_autocorrelation}"
           + f") on every corruption (severity {args.severity}, whole"
           f" split) x {args.orderings} orderings x label order; an early rule M/D decides"
           " \"on\" at the first probed image n >= M whose running score exceeds D."
           " flips: probes it turns on that the whole probe turned off (of"
           f" {len(probes)}); early: shuffled probes it ends early (of"
           f" {sum(p.order == 'shuffled' for p in probes)}); points: accuracy it adds on"
           " shuffled streams (the probe's remaining images, mean over corruptions).", "",
           "| M \\ D | " + " | ".join(args.early_deltas.split(",")) + " |",
           "| --- |" + " ---: |" * len(args.early_deltas.split(","))]
  for m in (int(v) for v in args.early_images.split(",")):
    cells = []
    for d in (float(v) for v in args.early_deltas.split(",")):
      flips, early, points = price(probes, m, d)
      cells.append(f"{flips} flips, {early} early, +{points:.3f}")
    lines.append(f"| {m} | " + " | ".join(cells) + " |")
  lines += ["", "Running scores (nats) at 32 / 64 / 96 / 128 / 256 images; whole-probe"
            " decision:", "", "| label order | stream | ordering | 32 | 64 | 96 | 128 |"
            " 256 | on |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
  for p in probes:
    at = " | ".join(f"{p.scores[n - 1]:+.3f}" for n in (32, 64, 96, 128, len(p.scores)))
    lines.append(f"| {p.order} | {p.stream} | {p.ordering} | {at} | {p.fired} |")
  lines.append(f"\n# total {time.time() - t0:.0f} s")
  with open(args.output, "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines[:5 + len(args.early_images.split(","))]))


if __name__ == "__main__":
  main()
