"""How much of FORGE's recovery any gate that probes before it adapts can keep.

Issue 36 asks the gated default to keep at least 90% of plain FORGE's recovery on
shuffled 2,000-image streams. A gate whose first probe lets the source predict (the
controller's design: the probe compares the two paths before trusting one) gives up
the recovery of those images whatever it decides afterwards. This measures the ceiling
with an oracle in place of the decision: the source predicts the first probe (--probe
images, rounded up to whole batches, as the controller decides at the end of a call),
then the better of FORGE and the source on the rest of that stream, chosen with the
labels. FORGE's state during the probe evolves as plain FORGE's does (the probe's
adapting pass runs every image), so its accuracy after the probe is plain FORGE's.
"no probe" is the same oracle from the first image. Recovery kept = (gated - source) /
(FORGE - source) over the mean of the corruptions, as benchmarks/field_protocols.py
reports it; shuffled streams, severity 5, as `deploy.corrupted_stream` presents them
(export-firmware's streams; their source and FORGE means are within 0.2 points of
field_protocols.py's).

    python benchmarks/kept_ceiling.py --data_dir=../shared/datasets/cifar10 \\
        --artifacts=runs/r20_safe.tflite,runs/mnv2_safe.tflite,runs/r8_safe.tflite \\
        --output=benchmarks/results/kept_ceiling.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import command_line, dated, emit  # noqa: E402
from benchmarks.detector_agreement import path_predictions  # noqa: E402


def measure(path: str, data_dir: str, limit: int, orderings: int, batch: int,
            probe: int) -> dict:
  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import CORRUPTIONS
  from forge_tflm.runtime.segmented import ADAPT, SOURCE, SegmentedModel

  artifact = Artifact.load(path)
  model = SegmentedModel.from_artifact(artifact)
  first = -(-probe // batch) * batch  # The images the source predicts.
  acc = {k: [] for k in ("source", "forge", "probe_first", "no_probe")}
  for k in range(orderings):
    for name in CORRUPTIONS:
      stream = deploy.corrupted_stream(data_dir, name, 5, limit=limit, seed=0,
                                       ordering_index=k)
      x = deploy.model_input(artifact, stream.images)
      s = path_predictions(model, x, SOURCE, batch) == stream.labels
      f = path_predictions(model, x, ADAPT, batch) == stream.labels
      rest = max(f[first:].sum(), s[first:].sum())
      acc["source"].append(s.mean())
      acc["forge"].append(f.mean())
      acc["probe_first"].append((s[:first].sum() + rest) / len(s))
      acc["no_probe"].append(max(f.sum(), s.sum()) / len(s))
  return {k: 100 * float(np.mean(v)) for k, v in acc.items()}


def kept(row: dict, key: str) -> float:
  return 100 * (row[key] - row["source"]) / (row["forge"] - row["source"])


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--artifacts", required=True, help="comma-separated .tflite paths")
  ap.add_argument("--limit", type=int, default=2000, help="images per corruption")
  ap.add_argument("--orderings", default="3,1,1",
                  help="orderings per artifact, comma-separated, in --artifacts order")
  ap.add_argument("--batch_sizes", default="64,1")
  ap.add_argument("--probe", type=int, default=256, help="the gate's probe_images")
  ap.add_argument("--output", default=None)
  args = ap.parse_args()
  t0 = time.time()
  lines = ["| model | batch | orderings | int8 source | FORGE | source predicts the first"
           " probe, then the better path | kept | the better path from the first image"
           " | kept |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
  paths = args.artifacts.split(",")
  orderings = [int(v) for v in args.orderings.split(",")]
  for path, n in zip(paths, orderings + [1] * (len(paths) - len(orderings))):
    for batch in (int(b) for b in args.batch_sizes.split(",")):
      r = measure(path, args.data_dir, args.limit, n, batch, args.probe)
      lines.append(f"| {os.path.basename(path)} | {batch} | {n} | {r['source']:.1f} |"
                   f" {r['forge']:.1f} | {r['probe_first']:.1f} | {kept(r, 'probe_first'):.1f}%"
                   f" | {r['no_probe']:.1f} | {kept(r, 'no_probe'):.1f}% |")
      print(lines[-1], file=sys.stderr, flush=True)
  head = [dated(command_line("kept_ceiling.py", sys.argv[1:])),
          f"# total {time.time() - t0:.0f} s", "",
          "## The recovery a probe-first gate can keep at most (oracle decisions)", "",
          f"{args.limit} test images per corruption, severity 5, shuffled, seed 0; the"
          f" source predicts the first {args.probe} images (rounded up to whole batches),"
          " then the better of FORGE and the source on that stream, chosen with the"
          " labels; accuracy: mean over the 15 corruptions and the orderings.", ""]
  emit("\n".join(head + lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
