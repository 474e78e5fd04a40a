"""Could a shift of cheap running statistics tell the controller when to probe again?

Issue 36 asks for a cheaper signal than a timer for when to decide again, "for example
on a detected shift of the running statistics". A trigger compares the mean of a
feature over the last --span images with its mean when the last decision fell, in
units of its standard error: z = |mean_A - mean_B| / (sd_A / sqrt(span)), the largest
over the features. It must fire when the corruption changes and stay quiet when only
the class changes (a label-correlated stream changes class every few hundred images).
Per corruption (severity 5, --limit images, seed 0) this prints the z of the nearest
other corruption and of its most and median-distant pair of class means:

  input   per image and RGB channel: the mean, the standard deviation (log) and the mean
          absolute difference of neighbouring pixels (log): 9 features, no model;
  site0   per image and channel of each artifact's first FORGE site's input (the stem
          conv's int8 output, source mode): its mean and standard deviation (log).

A trigger with threshold T fires on a change of corruption only where that pair's z
exceeds T, and on a change of class where the class pair's z does.

    python benchmarks/shift_signal.py --data_dir=../shared/datasets/cifar10 \\
        --artifacts=runs/r20_safe.tflite,runs/mnv2_safe.tflite,runs/r8_safe.tflite \\
        --output=benchmarks/results/shift_signal.md
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


def input_features(images: np.ndarray) -> np.ndarray:
  x = images.astype(np.float32)
  grad = (np.abs(np.diff(x, axis=2)).mean((1, 2)) + np.abs(np.diff(x, axis=1)).mean((1, 2)))
  return np.concatenate([x.mean((1, 2)), np.log1p(x.std((1, 2))), np.log1p(grad / 2)], 1)


def site0_features(model, x: np.ndarray, batch: int = 64) -> np.ndarray:
  """Per image and channel of the first FORGE site's input: mean, log standard dev."""
  from forge_tflm.runtime.segmented import SOURCE

  first = model.nodes[0].name
  seen = []

  def kernel(node, xin, mode):
    if node.name == first:
      v = xin.reshape(len(xin), -1, xin.shape[-1]).astype(np.float32)
      seen.append(np.concatenate([v.mean(1), np.log1p(v.std(1))], 1))
    return node.op(xin, mode=mode)

  model.forge_kernel = kernel
  try:
    for i in range(0, len(x), batch):
      model.run(x[i:i + batch], mode=SOURCE)
  finally:
    model.forge_kernel = None
  return np.concatenate(seen)


def z(a: np.ndarray, b: np.ndarray, sd: np.ndarray, span: int) -> float:
  return float(np.max(np.abs(a - b) / np.maximum(sd / np.sqrt(span), 1e-12)))


def table(title: str, feats: dict, labels: dict, span: int) -> list[str]:
  lines = [f"### {title}", "", "| corruption | nearest corruption | z | class pairs: largest z"
           " | median z | corruptions closer than its largest class pair |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
  missed = 0
  for name, f in feats.items():
    sd = f.std(0)
    others = {o: z(f.mean(0), g.mean(0), sd, span) for o, g in feats.items() if o != name}
    near = min(others, key=others.get)
    means = np.stack([f[labels[name] == k].mean(0) for k in np.unique(labels[name])])
    pairs = [z(means[i], means[j], sd, span) for i in range(len(means))
             for j in range(i + 1, len(means))]
    closer = sum(v < max(pairs) for v in others.values())
    missed += others[near] < max(pairs)
    lines.append(f"| {name} | {near} | {others[near]:.1f} | {max(pairs):.1f} |"
                 f" {np.median(pairs):.1f} | {closer} of {len(others)} |")
  lines += ["", f"Corruptions whose nearest other corruption is closer than their most"
            f" distant pair of classes: {missed} of {len(feats)}.", ""]
  return lines


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--artifacts", default="", help="comma-separated .tflite paths (site0)")
  ap.add_argument("--limit", type=int, default=2000, help="images per corruption")
  ap.add_argument("--span", type=int, default=64, help="images a window averages")
  ap.add_argument("--output", default=None)
  args = ap.parse_args()
  from forge_tflm import deploy
  from forge_tflm.artifact import Artifact
  from forge_tflm.corruptions import CORRUPTIONS
  from forge_tflm.runtime.segmented import SegmentedModel

  t0 = time.time()
  streams = {c: deploy.corrupted_stream(args.data_dir, c, 5, limit=args.limit, seed=0)
             for c in CORRUPTIONS}
  labels = {c: s.labels for c, s in streams.items()}
  body = table("input statistics (9 features, no model)",
               {c: input_features(s.images) for c, s in streams.items()}, labels, args.span)
  for path in filter(None, args.artifacts.split(",")):
    artifact = Artifact.load(path)
    model = SegmentedModel.from_artifact(artifact)
    feats = {c: site0_features(model, deploy.model_input(artifact, s.images))
             for c, s in streams.items()}
    body += table(f"{os.path.basename(path)}: first FORGE site's input"
                  f" ({model.nodes[0].name}, {2 * feats[CORRUPTIONS[0]].shape[1] // 2}"
                  " features)", feats, labels, args.span)
  head = [dated(command_line("shift_signal.py", sys.argv[1:])),
          f"# total {time.time() - t0:.0f} s", "",
          "## A shift trigger on running statistics: corruption changes against class"
          " changes", "",
          f"{args.limit} test images per corruption, severity 5, seed 0; z: the largest over"
          f" the features of |mean difference| / (standard deviation / sqrt({args.span}))"
          " (a window of that many images against the reference).", ""]
  emit("\n".join(head + body), args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
