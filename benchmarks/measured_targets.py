"""How many clean images do measured targets need, and how close are they to the BN's?

From a plain int8 .tflite (no BN left) `forge_tflm convert` measures FORGE's targets:
each conv's pre-activation mean and std over the calibration images. This measures
them with the converter's own code (converter/frontend_tflite.py) on N = --sizes
training images (the converter's draw) and compares, per channel, with
  - the targets recorded at fold time in the float path's artifact (--recorded: the
    BN's beta and |gamma|), and
  - the targets measured on the largest N (how far a smaller N is from converged).
Errors are in units of the site's mean |gamma| (recorded): |d beta| and |d |gamma||,
mean over channels, then the worst site.

    python benchmarks/measured_targets.py --plain=runs/r20_plain.tflite \\
        --recorded=runs/r20_forge.tflite --data_dir=../shared/datasets/cifar10 \\
        --output=benchmarks/results/measured_targets_r20.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks._report import emit  # noqa: E402


def _recorded(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  from forge_tflm import model_check
  from forge_tflm import tflite_graph as tg
  from forge_tflm.artifact import Artifact

  artifact = Artifact.load(path, require_manifest=True)
  model = tg.load_model(artifact.model)
  return {s.name: (lambda n: (n.beta, n.gamma_abs))(
      model_check.forge_node(model, s.op_index, path)) for s in artifact.manifest.sites}


def _measure(plain: str, images: np.ndarray, contract, n: int, seed: int):
  from forge_tflm.converter.frontend_tflite import TfliteFrontend

  frontend = TfliteFrontend(plain)
  pick = np.sort(np.random.default_rng(seed).permutation(len(images))[:n])
  sites = frontend.measure_targets(frontend.find_sites(), contract.to_float(images[pick]))
  return {s.name: (s.beta, s.gamma_abs) for s in sites}


def _errors(got: dict, want: dict, unit: dict) -> tuple[float, float, str]:
  """(mean-over-sites, worst site) of the mean |d beta| + |d gamma| in gamma units."""
  per_site = {}
  for name in want:
    if name not in got:
      continue
    (b, g), (wb, wg) = got[name], want[name]
    per_site[name] = (float(np.mean(np.abs(b - wb))) / unit[name],
                      float(np.mean(np.abs(g - wg))) / unit[name])
  worst = max(per_site, key=lambda k: sum(per_site[k]))
  mean = np.mean([sum(v) for v in per_site.values()])
  return float(mean), float(sum(per_site[worst])), worst


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--plain", required=True, help="the plain int8 .tflite")
  ap.add_argument("--recorded", default=None, help="the float path's artifact (optional)")
  ap.add_argument("--data_dir", required=True)
  ap.add_argument("--input_range", default="0,1")
  ap.add_argument("--sizes", default="50,100,300,1000,3000")
  ap.add_argument("--output", default=None)
  args = ap.parse_args(argv)

  from forge_tflm.artifact import InputContract
  from forge_tflm.data import load_dataset

  low, high = (float(v) for v in args.input_range.split(","))
  contract = InputContract("range", low, high)
  images = load_dataset("cifar10", "train", args.data_dir).images
  sizes = [int(v) for v in args.sizes.split(",")]
  t0 = time.time()
  measured = {n: _measure(args.plain, images, contract, n, 0) for n in sizes}
  recorded = _recorded(args.recorded) if args.recorded else None
  reference = measured[max(sizes)]
  unit = {k: float(np.mean((recorded or reference)[k][1])) for k in reference}
  if recorded and set(recorded) != set(reference):
    print(f"warning: site names differ ({sorted(set(recorded) ^ set(reference))[:4]})")
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                          capture_output=True, text=True).stdout.strip()
  lines = [f"# Measured targets vs calibration images: {os.path.basename(args.plain)}", "",
           f"{datetime.date.today()}, commit {commit}, {time.time() - t0:.0f} s:",
           f"`python benchmarks/measured_targets.py {' '.join(sys.argv[1:])}`", "",
           "Error = mean over channels of |d beta| + |d |gamma||, in units of the site's"
           " mean |gamma|; mean over sites (worst site).", ""]
  header = f"| N images | vs N = {max(sizes)} |"
  rule = "| ---: | ---: |"
  if recorded:
    header += " vs recorded (BN beta, \\|gamma\\|) |"
    rule += " ---: |"
  lines += [header, rule]
  for n in sizes:
    mean, worst, site = _errors(measured[n], reference, unit)
    row = f"| {n} | {mean:.3f} (worst {worst:.3f}, {site}) |"
    if recorded:
      mean, worst, site = _errors(measured[n], recorded, unit)
      row += f" {mean:.3f} (worst {worst:.3f}, {site}) |"
    lines.append(row)
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
