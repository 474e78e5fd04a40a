"""How many clean images do measured targets need?

From a plain int8 .tflite (no BN left) `forge_tflm convert` measures FORGE's targets:
the mean and std of each conv's output as the model computes it (after its fused
activation) over the calibration images. This measures them with the converter's own
code (converter/frontend_tflite.py) on N = --sizes training images (the converter's
draw) and compares, per channel, with the targets measured on the largest N (how far a
smaller N is from converged). Errors are in units of the site's mean |gamma|: |d beta|
and |d |gamma||, mean over channels, then the worst site. (They describe the tensor
after the activation, so they are not comparable channel by channel with a BN's
recorded beta, |gamma|; FORGE's recovery compares the two: docs/usage/converting.md.)

    python benchmarks/measured_targets.py --plain=runs/r20_plain.tflite \\
        --data_dir=../shared/datasets/cifar10 \\
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
  reference = measured[max(sizes)]
  unit = {k: float(np.mean(reference[k][1])) or 1.0 for k in reference}
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                          capture_output=True, text=True).stdout.strip()
  lines = [f"# Measured targets vs calibration images: {os.path.basename(args.plain)}", "",
           f"{datetime.date.today()}, commit {commit}, {time.time() - t0:.0f} s:",
           f"`python benchmarks/measured_targets.py {' '.join(sys.argv[1:])}`", "",
           "Error = mean over channels of |d beta| + |d |gamma||, in units of the site's"
           " mean |gamma|; mean over sites (worst site).", ""]
  lines += [f"| N images | vs N = {max(sizes)} |", "| ---: | ---: |"]
  for n in sizes:
    mean, worst, site = _errors(measured[n], reference, unit)
    lines.append(f"| {n} | {mean:.3f} (worst {worst:.3f}, {site}) |")
  emit("\n".join(lines) + "\n", args.output)
  return 0


if __name__ == "__main__":
  sys.exit(main())
